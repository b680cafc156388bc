-- The PostgreSQL twin of sqlite/0001_initial.sql: the same tables, columns and index names.
-- Times are seconds since the epoch (DOUBLE PRECISION), flags are 0/1 integers, so the
-- project's SQL is the same text on both databases.

-- Source side: the transactional outbox. (The reference domain's tables are the lab's:
-- the plug-in's warehouse/migrations/, applied by the lab's own calls only.)
-- seq comes from an identity sequence: it only grows, so it is the acceptance order. (Values
-- are handed out when a row is inserted, not when it commits: a reader can see seq 7 commit
-- before seq 6 does. Order is kept per partition by the lease, see partitions.)
CREATE TABLE ackledger_outbox (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0 CHECK (sent IN (0, 1)),
    quarantined INTEGER NOT NULL DEFAULT 0 CHECK (quarantined IN (0, 1)),
    quarantine_reason TEXT,
    quarantined_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    sent_at DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    last_attempt_at DOUBLE PRECISION
);

-- Only unsent, unquarantined rows are in these indexes, so pending() and a partition's
-- pending read touch a handful of index entries however many sent rows the table holds.
CREATE INDEX ackledger_outbox_pending ON ackledger_outbox (seq) WHERE sent = 0 AND quarantined = 0;
CREATE INDEX ackledger_outbox_partition_pending ON ackledger_outbox (partition_key, seq) WHERE sent = 0 AND quarantined = 0;
CREATE INDEX ackledger_outbox_sent_at ON ackledger_outbox (sent_at) WHERE sent = 1;

-- Sink side: one row per event id ever applied.
CREATE TABLE ackledger_inbox (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    first_received_at DOUBLE PRECISION NOT NULL,
    last_received_at DOUBLE PRECISION NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1
);

-- Durable counters for what leaves no row of its own (duplicates, conflicts).
CREATE TABLE ackledger_counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
