-- Operations on the outbox (the PostgreSQL twin of sqlite/0003_operations.sql).
CREATE TABLE ackledger_outbox_log (
    seq BIGSERIAL PRIMARY KEY,
    event_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL
);

CREATE INDEX ackledger_outbox_log_event ON ackledger_outbox_log (event_id, seq);

CREATE INDEX ackledger_outbox_quarantined ON ackledger_outbox (seq) WHERE quarantined = 1 AND sent = 0;
