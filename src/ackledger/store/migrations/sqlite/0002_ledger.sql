-- The idempotency ledger: what was asked (attempts) is kept apart from what was done
-- (deliveries), so deduplicating the effect never erases the evidence of a retry.

-- One row per delivery (the effect). In idempotent mode there is at most one per business key
-- (case_id, work_id); in control mode every request makes one, which is why the uniqueness is
-- a partial index and not a table constraint.
CREATE TABLE ackledger_deliveries (
    delivery_no INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL,
    work_id TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('idempotent', 'control')),
    fingerprint TEXT NOT NULL,
    pod_uid TEXT NOT NULL,
    created_at REAL NOT NULL
);

CREATE UNIQUE INDEX ackledger_deliveries_key ON ackledger_deliveries (case_id, work_id) WHERE mode = 'idempotent';
CREATE INDEX ackledger_deliveries_case ON ackledger_deliveries (case_id, delivery_no);

-- One row per request, whatever its outcome. delivery_no is NULL only for a conflict (the key
-- arrived with another payload and no delivery was handed out).
CREATE TABLE ackledger_attempts (
    attempt_no INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL,
    work_id TEXT NOT NULL,
    pod_uid TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('idempotent', 'control')),
    delivery_no INTEGER REFERENCES ackledger_deliveries (delivery_no),
    outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'duplicate', 'conflict')),
    fingerprint TEXT NOT NULL,
    at REAL NOT NULL,
    CHECK ((outcome = 'conflict') = (delivery_no IS NULL))
);

-- Counting a key's attempts and finding keys idle since a cut-off both read this index.
CREATE INDEX ackledger_attempts_key ON ackledger_attempts (case_id, work_id, at);
CREATE INDEX ackledger_attempts_delivery ON ackledger_attempts (delivery_no);
