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

-- The inbox's key becomes (source, id): SQLite cannot change a primary key in place, so the
-- table is rebuilt. A receipt keeps the event's type, not its data: the handler's effect is
-- the user's, in the user's tables. The key leads with the id, so `trace` and GET
-- /events/{id} find a receipt by id alone through it, and WITHOUT ROWID makes the table that
-- one B-tree: a commit of N receipts writes the pages of one index, not of a table, its
-- key's index and an id index.
CREATE TABLE ackledger_inbox_v2 (
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

INSERT INTO ackledger_inbox_v2 (source, id, type, fingerprint, first_received_at, last_received_at,
    receipts, arrival, last_arrival)
SELECT 'urn:ackledger:v1', id, 'warehouse.stock.added', fingerprint, first_received_at,
    last_received_at, receipts, arrival, last_arrival FROM ackledger_inbox;

DROP TABLE ackledger_inbox;
ALTER TABLE ackledger_inbox_v2 RENAME TO ackledger_inbox;
