-- CONTRACT v2 (the PostgreSQL twin of sqlite/0007_cloudevents.sql; the reasons are there).
CREATE TABLE ackledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

ALTER TABLE outbox ADD COLUMN source TEXT;
ALTER TABLE outbox ADD COLUMN type TEXT;
ALTER TABLE outbox ADD COLUMN subject TEXT;
ALTER TABLE outbox ADD COLUMN partitionkey TEXT;
ALTER TABLE outbox ADD COLUMN data TEXT;
ALTER TABLE outbox ADD COLUMN event TEXT;

UPDATE outbox SET
    source = 'urn:ackledger:v1',
    type = 'warehouse.stock.added',
    subject = sku,
    partitionkey = partition_key,
    data = '{"qty":' || qty || ',"sku":' || to_json(sku)::text || '}',
    event = '{"data":{"qty":' || qty || ',"sku":' || to_json(sku)::text || '},"id":'
        || to_json(id)::text || ',"partitionkey":' || to_json(partition_key)::text
        || ',"source":"urn:ackledger:v1","specversion":"1.0","subject":' || to_json(sku)::text
        || ',"type":"warehouse.stock.added"}';

-- A v1 outbox's own source is urn:ackledger:v1 as well (not a fresh one): an order it
-- accepted before the upgrade, accepted again after it, is the same event, not a conflict.
INSERT INTO ackledger_meta (name, value)
SELECT 'outbox.source', 'urn:ackledger:v1'
WHERE EXISTS (SELECT 1 FROM outbox) OR EXISTS (SELECT 1 FROM orders);

ALTER TABLE outbox DROP COLUMN sku;
ALTER TABLE outbox DROP COLUMN qty;

ALTER TABLE inbox ADD COLUMN source TEXT NOT NULL DEFAULT 'urn:ackledger:v1';
ALTER TABLE inbox ALTER COLUMN source DROP DEFAULT;
ALTER TABLE inbox ADD COLUMN type TEXT NOT NULL DEFAULT 'warehouse.stock.added';
ALTER TABLE inbox ALTER COLUMN type DROP DEFAULT;
ALTER TABLE inbox DROP CONSTRAINT inbox_pkey;
ALTER TABLE inbox ADD PRIMARY KEY (id, source);
ALTER TABLE inbox DROP COLUMN sku;
ALTER TABLE inbox DROP COLUMN qty;
