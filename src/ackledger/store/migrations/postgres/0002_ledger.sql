-- The idempotency ledger (PostgreSQL twin of sqlite/0002_ledger.sql; same names, same rules).
-- What was asked (attempts) is kept apart from what was done (deliveries).

-- In idempotent mode at most one delivery per (case_id, work_id); control mode makes one per
-- request, hence a partial unique index rather than a table constraint.
CREATE TABLE ackledger_deliveries (
    delivery_no BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    case_id TEXT NOT NULL,
    work_id TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('idempotent', 'control')),
    fingerprint TEXT NOT NULL,
    pod_uid TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE UNIQUE INDEX ackledger_deliveries_key ON ackledger_deliveries (case_id, work_id) WHERE mode = 'idempotent';
CREATE INDEX ackledger_deliveries_case ON ackledger_deliveries (case_id, delivery_no);

-- delivery_no is NULL only for a conflict.
CREATE TABLE ackledger_attempts (
    attempt_no BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    case_id TEXT NOT NULL,
    work_id TEXT NOT NULL,
    pod_uid TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('idempotent', 'control')),
    delivery_no BIGINT REFERENCES ackledger_deliveries (delivery_no),
    outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'duplicate', 'conflict')),
    fingerprint TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    CHECK ((outcome = 'conflict') = (delivery_no IS NULL))
);

CREATE INDEX ackledger_attempts_key ON ackledger_attempts (case_id, work_id, at);
CREATE INDEX ackledger_attempts_delivery ON ackledger_attempts (delivery_no);
