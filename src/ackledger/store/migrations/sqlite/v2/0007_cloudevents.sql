-- CONTRACT v2: any CloudEvent. The outbox keeps each event whole (`event`, its canonical JSON)
-- beside the columns the relay and the operators read; the inbox knows an event by its
-- identity (source, id). v1's sku and qty columns go: nothing in the core knows the lab.

-- Facts about the database itself; 'outbox.source' is the outbox's CloudEvents source, made
-- once (store/meta.py) and never changed, so a moved database keeps its events' identity.
CREATE TABLE ackledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- partition_key stays the relay's lease key ('' is the one shared partition of events that
-- name none); partitionkey is the event's own attribute, NULL when it has none.
ALTER TABLE outbox ADD COLUMN source TEXT;
ALTER TABLE outbox ADD COLUMN type TEXT;
ALTER TABLE outbox ADD COLUMN subject TEXT;
ALTER TABLE outbox ADD COLUMN partitionkey TEXT;
ALTER TABLE outbox ADD COLUMN data TEXT;
ALTER TABLE outbox ADD COLUMN event TEXT;

-- v1's events become warehouse.stock.added events with their ids kept. v1 knew events by id
-- alone, and so did its inboxes, so the events and the receipts of a v1 database share one
-- source, urn:ackledger:v1: a re-send of a migrated event meets its migrated receipt. Their
-- fingerprints stay v1's; the outbox and the inbox accept a v1 fingerprint of the same lab
-- event as the same content (store/legacy.py). Keys in sorted order: canonical JSON.
UPDATE outbox SET
    source = 'urn:ackledger:v1',
    type = 'warehouse.stock.added',
    subject = sku,
    partitionkey = partition_key,
    data = '{"qty":' || qty || ',"sku":' || json_quote(sku) || '}',
    event = '{"data":{"qty":' || qty || ',"sku":' || json_quote(sku) || '},"id":' || json_quote(id)
        || ',"partitionkey":' || json_quote(partition_key)
        || ',"source":"urn:ackledger:v1","specversion":"1.0","subject":' || json_quote(sku)
        || ',"type":"warehouse.stock.added"}';

-- A v1 outbox's own source is urn:ackledger:v1 as well (not a fresh one): an order it
-- accepted before the upgrade, accepted again after it, is the same event, not a conflict.
INSERT INTO ackledger_meta (name, value)
SELECT 'outbox.source', 'urn:ackledger:v1'
WHERE EXISTS (SELECT 1 FROM outbox) OR EXISTS (SELECT 1 FROM orders);

ALTER TABLE outbox DROP COLUMN sku;
ALTER TABLE outbox DROP COLUMN qty;

-- The inbox's key becomes (source, id): SQLite cannot change a primary key in place, so the
-- table is rebuilt. A receipt keeps the event's type, not its data: the handler's effect is
-- the user's, in the user's tables. The key leads with the id, so `trace` and GET
-- /events/{id} find a receipt by id alone through it, and WITHOUT ROWID makes the table that
-- one B-tree: a commit of N receipts writes the pages of one index, not of a table, its
-- key's index and an id index.
CREATE TABLE inbox_v2 (
    source TEXT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    first_received_at REAL NOT NULL,
    last_received_at REAL NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 1,
    arrival INTEGER,
    last_arrival INTEGER,
    PRIMARY KEY (id, source)
) WITHOUT ROWID;

INSERT INTO inbox_v2 (source, id, type, fingerprint, first_received_at, last_received_at,
    receipts, arrival, last_arrival)
SELECT 'urn:ackledger:v1', id, 'warehouse.stock.added', fingerprint, first_received_at,
    last_received_at, receipts, arrival, last_arrival FROM inbox;

DROP TABLE inbox;
ALTER TABLE inbox_v2 RENAME TO inbox;
