-- PostgreSQL twin of sqlite/0013_refused.sql (same names, same rules).
-- Messages a consumer refused for good (CONTRACT v3 section 13, "nothing disappears"): kept in
-- the inbox's database before the broker is told to drop or dead-letter them. refused_no names
-- a row for `refused replay`. refusal_key is the message's identity ("id" NUL "source") when it
-- was readable, else the hash of its bytes: with reason it makes a redelivered refusal one row
-- (refusals counts them). message holds at most 64 KiB of the raw body; message_bytes its whole
-- length (longer: cut, and a replay refuses it again).
CREATE TABLE ackledger_refused (
    refused_no BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source TEXT,
    id TEXT,
    refusal_key TEXT NOT NULL,
    reason TEXT NOT NULL,
    message BYTEA NOT NULL,
    message_bytes INTEGER NOT NULL,
    content_type TEXT,
    refused_at DOUBLE PRECISION NOT NULL,
    last_refused_at DOUBLE PRECISION NOT NULL,
    refusals INTEGER NOT NULL DEFAULT 1
);

CREATE UNIQUE INDEX ackledger_refused_once ON ackledger_refused (refusal_key, reason);
-- trace and reconcile look refusals up by event id.
CREATE INDEX ackledger_refused_id ON ackledger_refused (id);
