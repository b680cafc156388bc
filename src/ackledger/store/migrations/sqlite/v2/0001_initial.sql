-- Source side: the business table of the reference domain and the transactional outbox.
CREATE TABLE orders (
    id TEXT PRIMARY KEY,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    created_at REAL NOT NULL
);

-- seq is the rowid: it only grows, so it is the acceptance order.
CREATE TABLE outbox (
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
CREATE INDEX outbox_pending ON outbox (seq) WHERE sent = 0 AND quarantined = 0;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent = 1;

-- Sink side: one row per event id ever applied, and the effect it had.
CREATE TABLE inbox (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    first_received_at REAL NOT NULL,
    last_received_at REAL NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE inventory (
    sku TEXT PRIMARY KEY,
    qty INTEGER NOT NULL
);

-- Durable counters for what leaves no row of its own (duplicates, conflicts).
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
