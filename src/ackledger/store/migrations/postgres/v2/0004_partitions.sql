-- Partition leases: many relays share one outbox; a relay sends a partition's events only
-- while it holds that partition's lease. Every new lease takes a fencing token from one
-- sequence, so a later lease always has a larger token than any before it; a relay's mark is
-- accepted only if its (owner, token) is still the live lease (see store/lease_sql.py).
-- Rows are kept after release (expires_at in the past): they show who held what last.
CREATE TABLE partition_leases (
    partition_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    token BIGINT NOT NULL,
    acquired_at DOUBLE PRECISION NOT NULL,
    renewed_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);

CREATE SEQUENCE partition_lease_tokens AS BIGINT;

-- The sink's exact arrival sequence: arrival is the number of the first receipt of an id,
-- last_arrival of its latest receipt (a re-send), both from the counter 'sink.arrival' that
-- every receipt bumps inside its own transaction, so the numbers follow commit order.
ALTER TABLE inbox ADD COLUMN arrival BIGINT;
ALTER TABLE inbox ADD COLUMN last_arrival BIGINT;
