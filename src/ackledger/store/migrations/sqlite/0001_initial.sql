-- Source side: the transactional outbox. (The reference domain's tables are the lab's:
-- the plug-in's warehouse/migrations/, applied by the lab's own calls only.)
-- seq is the rowid: it only grows, so it is the acceptance order.
CREATE TABLE ackledger_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0 CHECK (sent IN (0, 1)),
    quarantined INTEGER NOT NULL DEFAULT 0 CHECK (quarantined IN (0, 1)),
    quarantine_reason TEXT,
    quarantined_at REAL,
    created_at REAL NOT NULL,
    sent_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    last_attempt_at REAL
);

-- Only unsent, unquarantined rows are in this index, so pending() reads a handful of index
-- entries however many sent rows the table holds.
CREATE INDEX ackledger_outbox_pending ON ackledger_outbox (seq) WHERE sent = 0 AND quarantined = 0;
CREATE INDEX ackledger_outbox_sent_at ON ackledger_outbox (sent_at) WHERE sent = 1;

-- Sink side: one row per event id ever applied.
CREATE TABLE ackledger_inbox (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    first_received_at REAL NOT NULL,
    last_received_at REAL NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1
);

-- Durable counters for what leaves no row of its own (duplicates, conflicts).
CREATE TABLE ackledger_counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
