-- Several inboxes may share one database (Inbox(name=...)): a receipt belongs to one inbox's
-- name, and each name applies an event once, so the key gains the name. It goes last: every
-- read by id (trace, GET /events/{id}), by identity and the purge's walk in (id, source) order
-- keep using the key as before. SQLite cannot change a primary key in place, so the table is
-- rebuilt; existing receipts are the default inbox's.
CREATE TABLE ackledger_inbox_named (
    source TEXT NOT NULL,
    id TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT 'default',
    type TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    first_received_at REAL NOT NULL,
    last_received_at REAL NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1,
    arrival INTEGER,
    last_arrival INTEGER,
    PRIMARY KEY (id, source, name)
) WITHOUT ROWID;

INSERT INTO ackledger_inbox_named (source, id, name, type, fingerprint, first_received_at,
    last_received_at, receipts, arrival, last_arrival)
SELECT source, id, 'default', type, fingerprint, first_received_at, last_received_at, receipts,
    arrival, last_arrival FROM ackledger_inbox;

DROP TABLE ackledger_inbox;
ALTER TABLE ackledger_inbox_named RENAME TO ackledger_inbox;

-- The oldest kept receipt is recorded per inbox name: a purge walks one inbox's receipts.
CREATE TABLE ackledger_inbox_oldest_named (
    name TEXT PRIMARY KEY,
    first_received_at REAL,
    cutoff REAL,
    generation INTEGER NOT NULL
);

INSERT INTO ackledger_inbox_oldest_named (name, first_received_at, cutoff, generation)
SELECT 'default', first_received_at, cutoff, generation FROM ackledger_inbox_oldest;

DROP TABLE ackledger_inbox_oldest;
ALTER TABLE ackledger_inbox_oldest_named RENAME TO ackledger_inbox_oldest;
