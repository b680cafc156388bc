-- Operations on the outbox: what operators (and the relay's poison policy) did to events, and
-- what that caused. One row per action; `detail` is JSON text (the reason of a quarantine, the
-- events delivered ahead of a requeued one). Rows are never updated, and purge leaves them.
CREATE TABLE outbox_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);

CREATE INDEX outbox_log_event ON outbox_log (event_id, seq);

-- Quarantined events are few; this keeps listing and counting them off the full table.
CREATE INDEX outbox_quarantined ON outbox (seq) WHERE quarantined = 1 AND sent = 0;
