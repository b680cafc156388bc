-- Operations on the outbox (the PostgreSQL twin of sqlite/0003_operations.sql).
CREATE TABLE outbox_log (
    seq BIGSERIAL PRIMARY KEY,
    event_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL
);

CREATE INDEX outbox_log_event ON outbox_log (event_id, seq);

CREATE INDEX outbox_quarantined ON outbox (seq) WHERE quarantined = 1 AND sent = 0;
