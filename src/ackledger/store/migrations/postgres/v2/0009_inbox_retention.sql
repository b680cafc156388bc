-- Inbox retention (Inbox.purge, `ackledger inbox purge`) deletes receipts by the time of their
-- first arrival, oldest first, a chunk per transaction; the oldest receipt's age is on the
-- sink's /metrics. This index makes both a walk from its first entry instead of a scan of the
-- table. first_received_at never changes, so a duplicate's update leaves the index alone.
CREATE INDEX IF NOT EXISTS inbox_first_received ON inbox (first_received_at);
