-- PostgreSQL twin of sqlite/0011_idempotency_keys.sql (same names, same rules).
-- Idempotency keys for the user's own functions and HTTP API (CONTRACT v3 section 14): one
-- row per (scope, key). scope names who the keys belong to (a decorated function, the HTTP
-- middleware); fingerprint is the hash of the call or request the key was first used for.
-- A row is 'in_progress' while a holder runs the work: lease_token names the holder and
-- lease_expires_at is when others may take it over (the holder renews it while it runs). A
-- 'completed' row keeps what a repeat gets: result (JSON text: a function's return value, or
-- an HTTP answer's status and headers) and body (an HTTP answer's bytes). expires_at is when
-- the key is forgotten (created_at + ttl); a release deletes the row.
CREATE TABLE ackledger_idempotency_keys (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    lease_token TEXT,
    lease_expires_at DOUBLE PRECISION,
    result TEXT,
    body BYTEA,
    created_at DOUBLE PRECISION NOT NULL,
    completed_at DOUBLE PRECISION,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, key)
);

-- The purge of expired keys reads them in expiry order.
CREATE INDEX ackledger_idempotency_keys_expiry ON ackledger_idempotency_keys (expires_at);
