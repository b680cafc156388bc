-- Migration 0009's index on first_received_at was a quarter of the WAL writes of every new
-- receipt. Retention no longer needs it: the purge walks the
-- inbox's key in windows, and the oldest kept receipt is recorded here by the purge, the only
-- deleter, as it walks (store/inbox.py). One row (slot 1). first_received_at NULL: nothing is
-- recorded (never purged, or the last purge kept nothing), so a reader finds it by one scan.
-- cutoff is that of the purge that recorded the row (NULL: none did); a purge with an earlier
-- cutoff than the recorded one leaves the row alone. generation grows with every record, so a
-- reader knows when what it found by a scan is out of date.
CREATE TABLE inbox_oldest (
    slot INTEGER PRIMARY KEY CHECK (slot = 1),
    first_received_at REAL,
    cutoff REAL,
    generation INTEGER NOT NULL
);

-- The oldest receipt of an existing inbox, read through the index while it is still there.
INSERT INTO inbox_oldest (slot, first_received_at, cutoff, generation)
SELECT 1, MIN(first_received_at), NULL, 0 FROM inbox;

DROP INDEX IF EXISTS inbox_first_received;
