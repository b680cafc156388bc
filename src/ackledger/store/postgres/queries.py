"""The statements PostgreSQL runs differently from SQLite (the names match sqlite/queries.py
where both dialects have the statement). Many writers run at once under READ COMMITTED: what
SQLite gets from its one writer, these get from advisory locks and single statements."""

from __future__ import annotations

import functools

from ..counters import bump_sql
from ..inbox import ARRIVAL
from ..keys import INBOX_INSERT, INBOX_ON_CONFLICT, MANY, OUTBOX_COLUMNS, OUTBOX_ON_CONFLICT
from ..ledger import INSERT_ATTEMPT
from ..outbox import SENT_BEFORE, SENT_UNLESS_HELD
from .notify import CHANNEL

#: The database's clock, in seconds since the epoch. ``clock_timestamp()`` (not ``now()``,
#: which is the transaction's start) so that a statement that waited for a lock judges expiry
#: at the moment it runs.
CLOCK = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
#: A new lease's token: a sequence, larger than every token before it.
NEXT_FENCE = "nextval('ackledger_partition_lease_tokens')"


# Lock + check + renew the lease and mark the events (a text array of distinct ids), in one
# statement. The UPDATE of the lease row locks it until commit: a takeover waits for the mark
# to commit, and a mark that comes after a takeover re-reads the row, finds another owner and
# marks nothing. All or nothing by itself, the renewal too: it writes only if every id is an
# event of the partition, so it needs no transaction around it (``Backend.statements``).
MARK_UNDER_LEASE = (
    """
WITH wanted AS (SELECT ?::text[] AS ids),
known AS (
    SELECT count(*) AS n FROM ackledger_outbox o, wanted
    WHERE o.id = ANY(wanted.ids) AND o.partition_key = ?
),
lease AS (
    UPDATE ackledger_partition_leases SET renewed_at = {now}, expires_at = {now} + ?
    WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
      AND (SELECT n FROM known) = (SELECT cardinality(ids) FROM wanted)
    RETURNING partition_key
)
UPDATE ackledger_outbox SET """
    + SENT_UNLESS_HELD  # unqualified names are the outbox's: the lease row has none of them
    + """,
    attempts = ackledger_outbox.attempts + ?,
    last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE ackledger_outbox.last_attempt_at END
FROM lease, wanted
WHERE ackledger_outbox.id = ANY(wanted.ids) AND ackledger_outbox.partition_key = lease.partition_key
RETURNING ackledger_outbox.seq
"""
)

# Mark a batch in one statement, all of it or nothing (an unknown id marks none): with no
# transaction around it, one round trip where BEGIN, UPDATE and COMMIT were three.
MARK_ALL_OR_NONE = (
    "WITH wanted AS (SELECT ?::text[] AS ids), "
    "known AS (SELECT count(*) AS n FROM ackledger_outbox, wanted WHERE ackledger_outbox.id "
    "= ANY(wanted.ids)) "
    f"UPDATE ackledger_outbox SET {SENT_UNLESS_HELD}, attempts = ackledger_outbox.attempts + ?, "
    "last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE ackledger_outbox.last_attempt_at END "
    "FROM wanted WHERE ackledger_outbox.id = ANY(wanted.ids) "
    "AND (SELECT n FROM known) = cardinality(wanted.ids) RETURNING ackledger_outbox.id"
)
KNOWN_IDS = "SELECT id FROM ackledger_outbox WHERE id = ANY(?::text[])"

#: The first key of the advisory locks that serialise enqueues per partition.
PARTITION_LOCK_CLASS = 0x6F627078  # "obpx"
LOCK_PARTITION = "SELECT pg_advisory_xact_lock(?, hashtext(?))"

#: What ackledger's names resolve to on this connection's search_path (``outbox_place``): no
#: statement that could fail, to_regclass answers NULL for a missing table.
OUTBOX_PLACE = (
    "SELECT to_regclass('ackledger_meta')::oid::bigint, "
    "to_regclass('ackledger_outbox')::oid::bigint, "
    "(SELECT relnamespace::regnamespace::text FROM pg_class "
    "WHERE oid = to_regclass('ackledger_outbox'))"
)


@functools.lru_cache(maxsize=64)
def enqueue_sql(schema: str | None) -> str:
    """The outbox's enqueue in one round trip (``PostgresTx.outbox_enqueue``): the partition's
    lock, the claim, and the relays' wake-up when the row is new. Its row is
    ``(took its turn, seq or NULL)``; its parameters the lock's two, then with ``schema`` the
    two table identities of a ``Place``, then the claim's row.

    With ``schema`` (the outbox's, as ``OUTBOX_PLACE`` named it) the row goes into that
    schema's table, and only while this connection's unqualified names still resolve to the
    same two tables: otherwise nothing is locked or written and the first column is false.
    Naming the schema keeps the statement valid when the search path no longer reaches it."""
    here = ""
    guard = ""
    table = "ackledger_outbox"
    if schema is not None:
        here = (
            "here AS MATERIALIZED (SELECT to_regclass('ackledger_meta')::oid::bigint AS meta, "
            "to_regclass('ackledger_outbox')::oid::bigint AS outbox), "
        )
        guard = " FROM here WHERE meta = ? AND outbox = ?"
        table = f"{schema}.{table}"
    marks = ", ".join("?" * len(OUTBOX_COLUMNS.split(",")))
    # MATERIALIZED: the lock runs once, and the INSERT reads its row from it, so the row's
    # seq is drawn only once the lock is held.
    return (
        f"WITH {here}turn AS MATERIALIZED (SELECT {LOCK_PARTITION[len('SELECT ') :]} AS held"
        f"{guard}), "
        f"claimed AS (INSERT INTO {table} ({OUTBOX_COLUMNS}) SELECT {marks} FROM turn "
        f"{OUTBOX_ON_CONFLICT}) "
        "SELECT EXISTS (SELECT FROM turn), claimed.seq, "
        f"CASE WHEN claimed.seq IS NOT NULL THEN pg_notify('{CHANNEL}', '')::text END "
        "FROM (SELECT) AS one LEFT JOIN claimed ON true"
    )


# Counted from the rows this DELETE removed: two purges at once (two replicas' cron jobs) each
# count only their own deletions; a count read before the DELETE would let both add the same
# rows and double the totals (found by review).
DELETE_SENT = (
    f"WITH gone AS (DELETE FROM ackledger_outbox {SENT_BEFORE} RETURNING attempts) "
    "SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM gone"
)


# The sink's arrival numbers and its first claim in one statement (``inbox_claim_arriving``):
# the counters' upsert, then each receipt numbered from the block it took. The block is an
# aggregate over every counter the upsert returns, so all of them are locked before any
# receipt is written (the lock order of every sink transaction: the arrival counter first);
# its row comes back even when no receipt was claimed.
@functools.lru_cache(maxsize=4 * MANY)
def claim_arriving_sql(counters: int, rows: int) -> str:
    numbered = "(?, ?, ?, ?, ?, ?, ?, (SELECT taken FROM block) + ?, (SELECT taken FROM block) + ?)"
    return (
        f"WITH counted AS ({bump_sql(counters)} RETURNING name, value), "
        f"block AS (SELECT max(value) FILTER (WHERE name = '{ARRIVAL}') - ? AS taken "
        "FROM counted), "
        f"claimed AS ({INBOX_INSERT}{', '.join([numbered] * rows)}{INBOX_ON_CONFLICT}) "
        "SELECT taken, NULL, NULL, NULL FROM block "
        "UNION ALL SELECT NULL, name, source, id FROM claimed"
    )


#: Rows a spread counter uses at most (see ``PostgresTx.counter_bump_spread``).
COUNTER_SHARDS = 64
BUMP_SPREAD = (
    "INSERT INTO ackledger_counters (name, value) VALUES (? || '#' || (pg_backend_pid() % ?), 1) "
    "ON CONFLICT (name) DO UPDATE SET value = ackledger_counters.value + 1"
)

#: The first key of the advisory locks that number the attempts of one key.
KEY_LOCK_CLASS = 0x6C646B79  # "ldky"
#: How long a request waits for its key's turn. A request holds the lock for milliseconds; one
#: that waits longer waits for a replica that is frozen or cut off, and without a limit every
#: request for that key, then the whole pool, would wait with it. The request fails instead
#: (a 503 the client retries), and the rest of the ledger goes on.
KEY_LOCK_TIMEOUT = "5s"
# The time-out is set for this transaction first (the subquery in FROM runs before the lock is
# asked for; a volatile call keeps it a subquery), in the same round trip.
LOCK_KEY = (
    "SELECT pg_advisory_xact_lock(?, hashtext(?)) "
    "FROM (SELECT set_config('lock_timeout', ?, true)) AS key_lock_timeout"
)

INSERT_ATTEMPT_ROW = INSERT_ATTEMPT + "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
COUNT_ATTEMPTS = "SELECT COUNT(*) FROM ackledger_attempts WHERE case_id = ? AND work_id = ?"

# The purge's candidates: the next keys after the cursor, in key order, whose last attempt is
# before the cutoff; each is tried for its key lock. The attempts_key index (case_id, work_id,
# at) serves the range, the grouping and the order, so a chunk reads from the cursor on and
# stops after its LIMIT: a whole purge reads the table about once, however many chunks it
# takes. MATERIALIZED keeps the LIMIT below the lock calls (a lock is tried only for a
# candidate).
IDLE_KEYS = (
    "WITH idle AS MATERIALIZED ("
    "SELECT case_id, work_id FROM ackledger_attempts WHERE (case_id, work_id) > (?, ?) "
    "GROUP BY case_id, work_id HAVING MAX(at) < ? ORDER BY case_id, work_id LIMIT ?) "
    "SELECT case_id, work_id, "
    "pg_try_advisory_xact_lock(?, hashtext(case_id || '/' || work_id)) FROM idle "
    "ORDER BY case_id, work_id"
)
# The keys the chunk holds (two arrays) that are still idle: checked again in a statement that
# starts after the locks were taken, so it sees every request that had a key's turn before.
# Their attempts go, and name the deliveries that go with them: every delivery is created
# together with an attempt that refers to it, so these are all the keys' deliveries.
DELETE_HELD_IDLE = (
    "DELETE FROM ackledger_attempts AS gone USING unnest(?::text[], ?::text[]) AS "
    "held(case_id, work_id) "
    "WHERE gone.case_id = held.case_id AND gone.work_id = held.work_id "
    "AND NOT EXISTS (SELECT 1 FROM ackledger_attempts AS recent WHERE recent.case_id = "
    "held.case_id "
    "AND recent.work_id = held.work_id AND recent.at >= ?) RETURNING gone.delivery_no"
)
DELETE_DELIVERIES = (
    "DELETE FROM ackledger_deliveries WHERE delivery_no = ANY(?::bigint[]) RETURNING 1"
)
