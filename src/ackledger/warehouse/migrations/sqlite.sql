-- The reference domain's tables (the lab's warehouse), not ackledger's: created only by the
-- lab's own calls (Outbox.accept, Inbox.stock, an inbox applying warehouse.stock.added,
-- `ackledger migrate --lab`), each time if missing, so running this again changes nothing.
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    sku TEXT NOT NULL,
    qty INTEGER NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS inventory (
    sku TEXT PRIMARY KEY,
    qty INTEGER NOT NULL
);
