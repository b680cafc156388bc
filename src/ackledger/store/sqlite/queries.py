"""The statements SQLite runs differently from PostgreSQL (the names match postgres/queries.py
where both dialects have the statement). SQLite has one writer at a time: a read followed by a
write in one transaction cannot race, which several of these rely on."""

from __future__ import annotations

from ..ledger import INSERT_ATTEMPT
from ..outbox import SENT_BEFORE, SENT_UNLESS_HELD

#: The database's clock, in seconds since the epoch.
CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
#: A new lease's token: the counter ``lease.token`` plus one, stored back by STORE_FENCE.
#: The schema's version and whether ackledger's meta and outbox tables are in it
#: (``SqliteTx.outbox_place``).
OUTBOX_PLACE = (
    "SELECT (SELECT schema_version FROM pragma_schema_version), "
    "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ackledger_meta'), "
    "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ackledger_outbox')"
)
NEXT_FENCE = "COALESCE((SELECT value FROM ackledger_counters WHERE name = 'lease.token'), 0) + 1"
STORE_FENCE = (
    "INSERT INTO ackledger_counters (name, value) VALUES ('lease.token', ?) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)

# The inbox's statements without RETURNING: SQLite runs a RETURNING clause through an ephemeral
# table of its own (a pager, a B-tree, zeroed page buffers: ~20-30k instructions a statement),
# and its one writer lets a plain read say the same.
#: What tells a claim of many rows without RETURNING which of its rows it inserted.
INBOX_CLAIMED_AS = (
    "SELECT fingerprint, arrival FROM ackledger_inbox WHERE name = ? AND source = ? AND id = ?"
)
ARRIVALS_TAKEN = "SELECT value FROM ackledger_counters WHERE name = 'sink.arrival'"
# A re-send's note with its arrival number read in the same statement: the counter is bumped
# only at the transaction's end, so each note adds its place in the group (1, 2, ...).
NOTE_RECEIPT_NEXT = (
    "UPDATE ackledger_inbox SET receipts = receipts + 1, last_received_at = ?, last_arrival = "
    "COALESCE((SELECT value FROM ackledger_counters WHERE name = 'sink.arrival'), 0) + ? "
    "WHERE name = ? AND source = ? AND id = ?"
)

# SQLite cannot update in a WITH clause; its one writer makes check-in-the-WHERE enough, and
# the renewal follows in the same transaction.
MARK_UNDER_LEASE = (
    "UPDATE ackledger_outbox SET "
    + SENT_UNLESS_HELD
    + """,
    attempts = attempts + ?, last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE last_attempt_at END
WHERE id = ? AND partition_key = ? AND EXISTS (
    SELECT 1 FROM ackledger_partition_leases l
    WHERE l.partition_key = ackledger_outbox.partition_key AND l.owner = ? AND l.token = ?
      AND l.expires_at > {now})
RETURNING seq
"""
)

#: Built on first use (migration 0006 says why); PostgreSQL keeps it from its first migration.
PARTITION_INDEX = "ackledger_outbox_partition_pending"
FIND_PARTITION_INDEX = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"
CREATE_PARTITION_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PARTITION_INDEX} ON ackledger_outbox (partition_key, seq) "
    "WHERE sent = 0 AND quarantined = 0"
)

# One writer: nothing changes these rows between the count and the DELETE (SQLite has no
# DELETE inside WITH).
COUNT_SENT = f"SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM ackledger_outbox {SENT_BEFORE}"
DELETE_SENT = f"DELETE FROM ackledger_outbox {SENT_BEFORE}"

# The attempt row and the key's attempt count in one statement. The count is a subquery of
# RETURNING, which SQLite evaluates after the row is inserted, so it includes this attempt; the
# key is given as parameters (a reference to the new row's columns would make the subquery
# correlated and scan the table). The attempts_count_ledger trigger (sqlite/0005) bumps the
# counters inside the same statement.
_COUNT_KEY = (
    "(SELECT COUNT(*) FROM ackledger_attempts AS earlier WHERE earlier.case_id = ? AND "
    "earlier.work_id = ?)"
)
RECORD_APPLIED = INSERT_ATTEMPT + f"VALUES (?, ?, ?, ?, ?, 'applied', ?, ?) RETURNING {_COUNT_KEY}"
# A key that was already there: the attempt copies the key's delivery and is a duplicate if
# the fingerprints match, else a conflict without delivery (and RETURNING still reports the
# delivery the key has; COALESCE runs that lookup only for a conflict).
RECORD_SEEN = (
    INSERT_ATTEMPT + "SELECT case_id, work_id, ?, 'idempotent', "
    "CASE WHEN fingerprint = ? THEN delivery_no END, "
    "CASE WHEN fingerprint = ? THEN 'duplicate' ELSE 'conflict' END, ?, ? "
    "FROM ackledger_deliveries WHERE case_id = ? AND work_id = ? AND mode = 'idempotent' "
    "RETURNING outcome, COALESCE(delivery_no, (SELECT delivery_no FROM ackledger_deliveries "
    "WHERE case_id = ? AND work_id = ? AND mode = 'idempotent')), "
    f"{_COUNT_KEY}"
)

# The purge's chunk: the next idle keys after the cursor, read and deleted in one write
# transaction (one writer: nothing asks for them in between).
IDLE_KEYS = (
    "SELECT case_id, work_id FROM ackledger_attempts WHERE (case_id, work_id) > (?, ?) "
    "GROUP BY case_id, work_id HAVING MAX(at) < ? ORDER BY case_id, work_id LIMIT ?"
)


def delete_keys(table: str, count: int) -> str:
    """Delete the rows of ``count`` keys (case_id, work_id pairs) from ``table``."""
    listed = ", ".join("(?, ?)" for _ in range(count))
    return f"DELETE FROM {table} WHERE (case_id, work_id) IN (VALUES {listed}) RETURNING 1"
