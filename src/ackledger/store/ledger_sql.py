"""Ledger queries beyond the idempotent claim of a business key (``keys.DELIVERIES``)."""

from __future__ import annotations

from typing import Any

from .base import Tx
from .inbox_sql import bump_spread_counter, counters
from .keys import DELIVERIES

__all__ = [
    "ATTEMPT_COLUMNS",
    "DELIVERY_COLUMNS",
    "attempts",
    "bump_spread_counter",
    "count_attempts",
    "counters",
    "deliveries",
    "insert_attempt",
    "insert_control_delivery",
    "lock_key",
    "purge_idle_chunk",
    "purge_idle_chunk_one_writer",
    "record_one_writer",
]

DELIVERY_COLUMNS = (
    "delivery_no", "case_id", "work_id", "mode", "pod_uid", "fingerprint", "created_at",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "attempt_no", "case_id", "work_id", "pod_uid", "mode", "delivery_no", "outcome", "at",
)  # fmt: skip


#: The first key of the advisory locks that number the attempts of one key (PostgreSQL).
KEY_LOCK_CLASS = 0x6C646B79  # "ldky"
#: How long a request waits for its key's turn (PostgreSQL). A request holds the lock for
#: milliseconds; one that waits longer waits for a replica that is frozen or cut off, and
#: without a limit every request for that key, then the whole pool, would wait with it. The
#: request fails instead (a 503 the client retries), and the rest of the ledger goes on.
KEY_LOCK_TIMEOUT = "5s"


def lock_key(tx: Tx, case_id: str, work_id: str) -> None:
    """Make everything that writes one key take turns from here to its commit (PostgreSQL;
    SQLite has one writer anyway). A request takes it BEFORE its claim, and the purge holds it
    (``purge_idle_chunk``) when it looks at a key a last time and deletes it, so that:

    * each request counts the attempts committed before it, and a key's attempt numbers are
      1, 2, 3...;
    * a request and a purge of one key never interleave: the request either sees the key whole
      (and the purge then sees its fresh attempt and keeps the key) or not at all (it starts
      the key afresh). Without the lock a request could find the delivery, the purge delete
      it and commit, and the request's attempt refer to a delivery that is gone.

    A request takes this one key lock only, so requests cannot wait on each other in a circle
    (``submit_many`` takes all of its keys' locks first, in key order, for the same reason).
    Requests for other keys do not wait (a hash collision only makes two keys share a turn,
    and hashes of keys taken in key order can still meet in a circle: then PostgreSQL's
    deadlock check ends one transaction, or ``KEY_LOCK_TIMEOUT`` does).
    """
    if tx.dialect == "postgres":
        tx.execute(
            # The time-out is set for this transaction first (the subquery in FROM runs before
            # the lock is asked for; a volatile call keeps it a subquery), in the same round trip.
            "SELECT pg_advisory_xact_lock(?, hashtext(?)) "
            "FROM (SELECT set_config('lock_timeout', ?, true)) AS key_lock_timeout",
            # "/" is in no key: no two keys join (``purge_idle_chunk`` hashes the same text).
            (KEY_LOCK_CLASS, f"{case_id}/{work_id}", KEY_LOCK_TIMEOUT),
        )


# Same parameters as the claim (keys.DELIVERIES): key, fingerprint, pod_uid, now.
_INSERT_CONTROL = (
    "INSERT INTO deliveries (case_id, work_id, fingerprint, mode, pod_uid, created_at) "
    "VALUES (?, ?, ?, 'control', ?, ?) RETURNING delivery_no"
)


def insert_control_delivery(
    tx: Tx, *, case_id: str, work_id: str, fingerprint: str, pod_uid: str, now: float
) -> int:
    """The comparison group: a plain insert, no key is looked up, every call is a delivery."""
    return int(tx.scalar(_INSERT_CONTROL, (case_id, work_id, fingerprint, pod_uid, now)))


#: Every attempt row is written with these columns, whichever statement writes it.
_INSERT_ATTEMPT = (
    "INSERT INTO attempts (case_id, work_id, pod_uid, mode, delivery_no, outcome, fingerprint, at) "
)


def insert_attempt(
    tx: Tx,
    *,
    case_id: str,
    work_id: str,
    pod_uid: str,
    mode: str,
    delivery_no: int | None,
    outcome: str,
    fingerprint: str,
    now: float,
) -> None:
    tx.execute(
        _INSERT_ATTEMPT + "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (case_id, work_id, pod_uid, mode, delivery_no, outcome, fingerprint, now),
    )


def count_attempts(tx: Tx, case_id: str, work_id: str) -> int:
    return int(
        tx.scalar(
            "SELECT COUNT(*) FROM attempts WHERE case_id = ? AND work_id = ?", (case_id, work_id)
        )
    )


# The attempt row and the key's attempt count in one statement. The count is a subquery of
# RETURNING, which SQLite evaluates after the row is inserted, so it includes this attempt; the
# key is given as parameters (a reference to the new row's columns would make the subquery
# correlated and scan the table). The attempts_count_ledger trigger (sqlite/0005) bumps the
# counters inside the same statement.
_COUNT_KEY = (
    "(SELECT COUNT(*) FROM attempts AS earlier WHERE earlier.case_id = ? AND earlier.work_id = ?)"
)
_INSERT_APPLIED = (
    _INSERT_ATTEMPT + f"VALUES (?, ?, ?, ?, ?, 'applied', ?, ?) RETURNING {_COUNT_KEY}"
)
# A key that was already there: the attempt copies the key's delivery and is a duplicate if
# the fingerprints match, else a conflict without delivery (and RETURNING still reports the
# delivery the key has; COALESCE runs that lookup only for a conflict).
_INSERT_SEEN = (
    _INSERT_ATTEMPT + "SELECT case_id, work_id, ?, 'idempotent', "
    "CASE WHEN fingerprint = ? THEN delivery_no END, "
    "CASE WHEN fingerprint = ? THEN 'duplicate' ELSE 'conflict' END, ?, ? "
    "FROM deliveries WHERE case_id = ? AND work_id = ? AND mode = 'idempotent' "
    "RETURNING outcome, COALESCE(delivery_no, (SELECT delivery_no FROM deliveries "
    "WHERE case_id = ? AND work_id = ? AND mode = 'idempotent')), "
    f"{_COUNT_KEY}"
)


def record_one_writer(
    tx: Tx, *, case_id: str, work_id: str, pod_uid: str, mode: str, fingerprint: str, now: float
) -> tuple[str, int, int]:
    """A whole ledger request on SQLite, in two statements: returns (outcome, delivery_no,
    attempt number).

    The claim is the same ``INSERT ... ON CONFLICT DO NOTHING`` on the unique key index as
    everywhere (``keys.DELIVERIES``); the comparison of fingerprints, the attempt row, its
    number and the counters then happen in one more statement. Correct because SQLite has one
    writer: nothing else changes the key between the claim and the count. PostgreSQL takes the
    general path in ``ackledger.ledger`` (advisory lock per key, spread counters).
    """
    if tx.dialect != "sqlite":
        raise ValueError(f"record_one_writer is for SQLite, not {tx.dialect}")
    # The statements are run directly rather than through KeySpace.claim and the helpers
    # above: at two statements a request, each layer of Python calls is a measurable share.
    claimed = tx.execute(
        _INSERT_CONTROL if mode == "control" else DELIVERIES.claim_sql,
        (case_id, work_id, fingerprint, pod_uid, now),
    )
    if claimed:
        delivery_no = claimed[0][0]
        rows = tx.execute(
            _INSERT_APPLIED,
            (case_id, work_id, pod_uid, mode, delivery_no, fingerprint, now, case_id, work_id),
        )
        return "applied", int(delivery_no), int(rows[0][0])
    rows = tx.execute(
        _INSERT_SEEN,
        (
            pod_uid, fingerprint, fingerprint, fingerprint, now, case_id, work_id,
            case_id, work_id, case_id, work_id,
        ),
    )  # fmt: skip
    if not rows:  # pragma: no cover - the claim saw the key, so it must be there
        raise RuntimeError(f"deliveries: key {(case_id, work_id)!r} vanished inside a transaction")
    outcome, found, attempt = rows[0]
    return str(outcome), int(found), int(attempt)


def _rows(
    tx: Tx, table: str, columns: tuple[str, ...], order: str, case_id: str | None
) -> list[dict[str, Any]]:
    select = f"SELECT {', '.join(columns)} FROM {table}"
    if case_id is None:
        rows = tx.execute(f"{select} ORDER BY {order}")
    else:
        rows = tx.execute(f"{select} WHERE case_id = ? ORDER BY {order}", (case_id,))
    return [dict(zip(columns, row, strict=True)) for row in rows]


def deliveries(tx: Tx, case_id: str | None) -> list[dict[str, Any]]:
    return _rows(tx, "deliveries", DELIVERY_COLUMNS, "delivery_no", case_id)


def attempts(tx: Tx, case_id: str | None) -> list[dict[str, Any]]:
    return _rows(tx, "attempts", ATTEMPT_COLUMNS, "attempt_no", case_id)


#: Keys per transaction of ``purge_idle_chunk`` and ``purge_idle_chunk_one_writer``.
PURGE_CHUNK = 500

# SQLite's chunk: the next idle keys after the cursor, read and deleted in the caller's one
# write transaction (one writer: nothing asks for them in between).
_IDLE_KEYS_ONE_WRITER = (
    "SELECT case_id, work_id FROM attempts WHERE (case_id, work_id) > (?, ?) "
    "GROUP BY case_id, work_id HAVING MAX(at) < ? ORDER BY case_id, work_id LIMIT ?"
)


def purge_idle_chunk_one_writer(
    tx: Tx, cutoff: float, after: tuple[str, str], limit: int = PURGE_CHUNK
) -> tuple[int, int, tuple[str, str] | None]:
    """``purge_idle_chunk`` for SQLite: up to ``limit`` idle keys after ``after``, whole.

    The purge goes in chunks here too, each its own short write transaction: the one writer
    is free between them, so a service on the same file waits milliseconds for a chunk, not
    seconds for a whole purge (its event loop and its health check wait with it).
    """
    if tx.dialect != "sqlite":
        raise ValueError(f"purge_idle_chunk_one_writer is for SQLite, not {tx.dialect}")
    found = tx.execute(_IDLE_KEYS_ONE_WRITER, (*after, cutoff, limit))
    if not found:
        return 0, 0, None
    keys = [(str(case_id), str(work_id)) for case_id, work_id in found]
    listed = ", ".join("(?, ?)" for _ in keys)
    flat = tuple(part for key in keys for part in key)
    # Attempts first (they refer to the deliveries); a key's deliveries all carry its key.
    gone_attempts = tx.execute(
        f"DELETE FROM attempts WHERE (case_id, work_id) IN (VALUES {listed}) RETURNING 1", flat
    )
    gone_deliveries = tx.execute(
        f"DELETE FROM deliveries WHERE (case_id, work_id) IN (VALUES {listed}) RETURNING 1", flat
    )
    return len(gone_deliveries), len(gone_attempts), keys[-1]


# The candidates: the next keys after the cursor, in key order, whose last attempt is before
# the cutoff; each is tried for its key lock. The attempts_key index (case_id, work_id, at)
# serves the range, the grouping and the order, so a chunk reads from the cursor on and stops
# after its LIMIT: a whole purge reads the table about once, however many chunks it takes.
# MATERIALIZED keeps the LIMIT below the lock calls (a lock is tried only for a candidate).
_IDLE_KEYS = (
    "WITH idle AS MATERIALIZED ("
    "SELECT case_id, work_id FROM attempts WHERE (case_id, work_id) > (?, ?) "
    "GROUP BY case_id, work_id HAVING MAX(at) < ? ORDER BY case_id, work_id LIMIT ?) "
    "SELECT case_id, work_id, "
    "pg_try_advisory_xact_lock(?, hashtext(case_id || '/' || work_id)) FROM idle "
    "ORDER BY case_id, work_id"
)
# The keys the chunk holds (two arrays) that are still idle: checked again in a statement that
# starts after the locks were taken, so it sees every request that had a key's turn before.
# Their attempts go, and name the deliveries that go with them: every delivery is created
# together with an attempt that refers to it, so these are all the keys' deliveries.
_DELETE_HELD_IDLE = (
    "DELETE FROM attempts AS gone USING unnest(?::text[], ?::text[]) AS held(case_id, work_id) "
    "WHERE gone.case_id = held.case_id AND gone.work_id = held.work_id "
    "AND NOT EXISTS (SELECT 1 FROM attempts AS recent WHERE recent.case_id = held.case_id "
    "AND recent.work_id = held.work_id AND recent.at >= ?) RETURNING gone.delivery_no"
)


def purge_idle_chunk(
    tx: Tx, cutoff: float, after: tuple[str, str], limit: int = PURGE_CHUNK
) -> tuple[int, int, tuple[str, str] | None]:
    """Forget idle keys on PostgreSQL, where requests run while the purge does: up to
    ``limit`` idle keys after the key ``after`` (in key order; ``("", "")`` is before every
    key). Returns (deliveries, attempts) removed and the last key looked at, the ``after`` of
    the next chunk (None: there was no key left).

    Each key's lock (the one ``lock_key`` takes for a request) is TRIED, never waited for: a
    key whose lock a request holds is being asked for, so it is not idle and is kept (as is,
    until the next purge, an idle key that shares its lock's hash). A purge never waits for a
    request, so it can hold many key locks, taken in any order, without a deadlock; a request
    for a key of the chunk waits at most for the chunk's commit.
    """
    if tx.dialect != "postgres":
        raise ValueError(f"purge_idle_chunk is for PostgreSQL, not {tx.dialect}")
    found = tx.execute(_IDLE_KEYS, (*after, cutoff, limit, KEY_LOCK_CLASS))
    if not found:
        return 0, 0, None
    last = (str(found[-1][0]), str(found[-1][1]))
    held = [(str(case_id), str(work_id)) for case_id, work_id, locked in found if locked]
    if not held:
        return 0, 0, last
    gone_attempts = tx.execute(
        _DELETE_HELD_IDLE, ([key[0] for key in held], [key[1] for key in held], cutoff)
    )
    numbers = sorted({int(row[0]) for row in gone_attempts if row[0] is not None})
    gone_deliveries = tx.execute(
        "DELETE FROM deliveries WHERE delivery_no = ANY(?::bigint[]) RETURNING 1", (numbers,)
    )
    return len(gone_deliveries), len(gone_attempts), last
