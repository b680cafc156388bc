-- CONTRACT v2 (the PostgreSQL twin of sqlite/0007_cloudevents.sql; the reasons are there).
CREATE TABLE ackledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

ALTER TABLE ackledger_outbox ADD COLUMN source TEXT;
ALTER TABLE ackledger_outbox ADD COLUMN type TEXT;
ALTER TABLE ackledger_outbox ADD COLUMN subject TEXT;
ALTER TABLE ackledger_outbox ADD COLUMN partitionkey TEXT;
ALTER TABLE ackledger_outbox ADD COLUMN data TEXT;
ALTER TABLE ackledger_outbox ADD COLUMN event TEXT;

-- This chain runs only on a database that held no ackledger tables: a v1 or v2 database
-- reaches the same schema through v2/ and the renames of store/namespace.py, so nothing of
-- v1 is converted here.

ALTER TABLE ackledger_outbox DROP COLUMN sku;
ALTER TABLE ackledger_outbox DROP COLUMN qty;

ALTER TABLE ackledger_inbox ADD COLUMN source TEXT NOT NULL DEFAULT 'urn:ackledger:v1';
ALTER TABLE ackledger_inbox ALTER COLUMN source DROP DEFAULT;
ALTER TABLE ackledger_inbox ADD COLUMN type TEXT NOT NULL DEFAULT 'warehouse.stock.added';
ALTER TABLE ackledger_inbox ALTER COLUMN type DROP DEFAULT;
ALTER TABLE ackledger_inbox DROP CONSTRAINT ackledger_inbox_pkey;
ALTER TABLE ackledger_inbox ADD PRIMARY KEY (id, source);
ALTER TABLE ackledger_inbox DROP COLUMN sku;
ALTER TABLE ackledger_inbox DROP COLUMN qty;
