-- Partition leases (see postgres/0004_partitions.sql for the reasoning). SQLite has one
-- writer at a time, so leases are simple here; tokens come from the counter 'lease.token'.
CREATE TABLE ackledger_partition_leases (
    partition_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    token INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    renewed_at REAL NOT NULL,
    expires_at REAL NOT NULL
);

-- A partition's pending events in seq order (PostgreSQL has this index from 0001).
CREATE INDEX ackledger_outbox_partition_pending ON ackledger_outbox (partition_key, seq) WHERE sent = 0 AND quarantined = 0;

-- The sink's exact arrival sequence (see postgres/0004_partitions.sql).
ALTER TABLE ackledger_inbox ADD COLUMN arrival INTEGER;
ALTER TABLE ackledger_inbox ADD COLUMN last_arrival INTEGER;
