-- PostgreSQL twin of sqlite/0012_inbox_names.sql (same names, same rules). The tables are
-- rebuilt rather than altered: their key constraints' names differ between a database made
-- with ackledger_ names and one renamed to them (namespace.adopt).
CREATE TABLE ackledger_inbox_named (
    source TEXT NOT NULL,
    id TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT 'default',
    type TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    first_received_at DOUBLE PRECISION NOT NULL,
    last_received_at DOUBLE PRECISION NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1,
    arrival BIGINT,
    last_arrival BIGINT,
    PRIMARY KEY (id, source, name)
);

INSERT INTO ackledger_inbox_named (source, id, name, type, fingerprint, first_received_at,
    last_received_at, receipts, arrival, last_arrival)
SELECT source, id, 'default', type, fingerprint, first_received_at, last_received_at, receipts,
    arrival, last_arrival FROM ackledger_inbox;

DROP TABLE ackledger_inbox;
ALTER TABLE ackledger_inbox_named RENAME TO ackledger_inbox;

CREATE TABLE ackledger_inbox_oldest_named (
    name TEXT PRIMARY KEY,
    first_received_at DOUBLE PRECISION,
    cutoff DOUBLE PRECISION,
    generation INTEGER NOT NULL
);

INSERT INTO ackledger_inbox_oldest_named (name, first_received_at, cutoff, generation)
SELECT 'default', first_received_at, cutoff, generation FROM ackledger_inbox_oldest;

DROP TABLE ackledger_inbox_oldest;
ALTER TABLE ackledger_inbox_oldest_named RENAME TO ackledger_inbox_oldest;
