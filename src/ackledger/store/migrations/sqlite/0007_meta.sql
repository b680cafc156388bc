-- STAND-IN, to drop at merge: the core rewrite's own 0007 creates this table (and writes its
-- 'outbox.source' row). The borrowed-connection check (store/borrowed.py, same_database) reads
-- that row to tell the outbox's database from another one.
CREATE TABLE ackledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
