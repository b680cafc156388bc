"""Partition leases, and a partition's pending events.

A lease row says which relay (``owner``) may send a partition's events, until when
(``expires_at``), under which fencing token. Expiry is judged by the *database's* clock, so
relays on machines whose clocks disagree still agree on who holds what. Every new lease takes a
token larger than any before it (PostgreSQL: a sequence; SQLite: the counter ``lease.token``).

The two rules that make a lease safe are each one statement:

- a claim takes a partition only if it has no live lease: an ``INSERT ... ON CONFLICT DO UPDATE
  ... WHERE expired``. Two relays that race for one partition queue on its row; the second
  then sees the first one's live lease and takes nothing (PostgreSQL re-checks the ``WHERE``
  against the row the first one committed). This is the "equivalent" of ``FOR UPDATE SKIP
  LOCKED``: a claimer never waits for more than another claim's one-statement transaction.
- a mark under a lease checks owner, token and expiry in the statement that marks. On
  PostgreSQL that statement also *updates* the lease row (renewing it), which locks the row
  until commit: a takeover waits for the mark to commit, and a mark that comes after a
  takeover re-reads the row, finds another owner and marks nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from .base import Tx
from .outbox_sql import SENT_UNLESS_HELD

#: The database's clock, in seconds since the epoch. ``clock_timestamp()`` (not ``now()``,
#: which is the transaction's start) so that a statement that waited for a lock judges expiry
#: at the moment it runs.
NOW = {
    "postgres": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}

#: Where a new lease's token comes from. SQLite has one writer at a time, so reading the
#: counter and storing it back (``_bump_token``) in one transaction cannot race.
NEXT_TOKEN = {
    "postgres": "nextval('partition_lease_tokens')",
    "sqlite": "COALESCE((SELECT value FROM counters WHERE name = 'lease.token'), 0) + 1",
}

# The partition of the oldest pending event that has no live lease. Reading the pending index
# in seq order, rows of held partitions are skipped one by one: with a few held partitions
# that is a few rows.
_CANDIDATE = """
clock AS (SELECT {now} AS now),
candidate AS (
    SELECT o.partition_key FROM outbox o
    WHERE o.sent = 0 AND o.quarantined = 0
      AND NOT EXISTS (
          SELECT 1 FROM partition_leases l, clock
          WHERE l.partition_key = o.partition_key AND l.expires_at > clock.now)
    ORDER BY o.seq LIMIT 1
)"""

_CLAIM = (
    "WITH"
    + _CANDIDATE
    + """
INSERT INTO partition_leases (partition_key, owner, token, acquired_at, renewed_at, expires_at)
SELECT candidate.partition_key, ?, {token}, clock.now, clock.now, clock.now + ?
FROM candidate, clock WHERE true
ON CONFLICT (partition_key) DO UPDATE SET
    owner = excluded.owner, token = excluded.token, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE partition_leases.expires_at <= excluded.acquired_at
RETURNING partition_key, token, expires_at
"""
)

_UNLEASED = "WITH" + _CANDIDATE + "\nSELECT partition_key FROM candidate"

_RENEW = """
UPDATE partition_leases SET renewed_at = {now}, expires_at = {now} + ?
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
RETURNING expires_at
"""

_RELEASE = """
UPDATE partition_leases SET expires_at = {now}
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
RETURNING token
"""

_IS_LIVE = """
SELECT 1 FROM partition_leases
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
"""

# PostgreSQL: lock + check + renew the lease and mark the event, in one statement.
_MARK_POSTGRES = (
    """
WITH lease AS (
    UPDATE partition_leases SET renewed_at = {now}, expires_at = {now} + ?
    WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
    RETURNING partition_key
)
UPDATE outbox SET """
    + SENT_UNLESS_HELD  # unqualified names are the outbox's: the lease row has none of them
    + """,
    attempts = outbox.attempts + ?,
    last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE outbox.last_attempt_at END
FROM lease
WHERE outbox.id = ? AND outbox.partition_key = lease.partition_key
RETURNING outbox.seq
"""
)

# SQLite cannot update in a WITH clause; its one writer makes check-in-the-WHERE enough, and
# the renewal follows in the same transaction.
_MARK_SQLITE = (
    "UPDATE outbox SET "
    + SENT_UNLESS_HELD
    + """,
    attempts = attempts + ?, last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE last_attempt_at END
WHERE id = ? AND partition_key = ? AND EXISTS (
    SELECT 1 FROM partition_leases l
    WHERE l.partition_key = outbox.partition_key AND l.owner = ? AND l.token = ?
      AND l.expires_at > {now})
RETURNING seq
"""
)

_LEASES = """
SELECT partition_key, owner, token, acquired_at, renewed_at, expires_at,
    CASE WHEN expires_at > {now} THEN 1 ELSE 0 END
FROM partition_leases ORDER BY partition_key
"""

LEASE_COLUMNS = ("partition", "owner", "token", "acquired_at", "renewed_at", "expires_at", "live")
PENDING_COLUMNS = ("seq", "id", "sku", "qty")


def _sql(template: str, tx: Tx) -> str:
    return _render(template, tx.dialect)


@functools.lru_cache(maxsize=64)
def _render(template: str, dialect: str) -> str:
    return template.format(now=NOW[dialect], token=NEXT_TOKEN[dialect])


def claim(tx: Tx, owner: str, ttl: float) -> tuple[str, int, float] | None:
    """Lease the partition of the oldest pending event that nobody holds; None if there is
    none (or another relay took it first)."""
    row = tx.one(_sql(_CLAIM, tx), (owner, ttl))
    if row is None:
        return None
    key, token, expires_at = str(row[0]), int(row[1]), float(row[2])
    if tx.dialect == "sqlite":
        _bump_token(tx, token)
    return key, token, expires_at


def unleased_work(tx: Tx) -> bool:
    """Is there a partition with pending events and no live lease?"""
    return tx.one(_sql(_UNLEASED, tx)) is not None


def _bump_token(tx: Tx, token: int) -> None:
    tx.execute(
        "INSERT INTO counters (name, value) VALUES ('lease.token', ?) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        (token,),
    )


def renew(tx: Tx, key: str, owner: str, token: int, ttl: float) -> float | None:
    """Extend a live lease to now + ttl; returns the new expiry, or None if it is not live."""
    value = tx.scalar(_sql(_RENEW, tx), (ttl, key, owner, token))
    return None if value is None else float(value)


def release(tx: Tx, key: str, owner: str, token: int) -> bool:
    """End a live lease now; False if it was not live any more."""
    return tx.one(_sql(_RELEASE, tx), (key, owner, token)) is not None


def is_live(tx: Tx, key: str, owner: str, token: int) -> bool:
    return tx.one(_sql(_IS_LIVE, tx), (key, owner, token)) is not None


def mark_sent(
    tx: Tx,
    key: str,
    owner: str,
    token: int,
    event_id: str,
    *,
    ttl: float,
    attempted: bool,
    now: float,
) -> str:
    """Mark one event of the partition sent if the lease is live (and renew it).

    Returns ``"marked"``, ``"lost"`` (the lease is not live: nothing was marked) or
    ``"unknown"`` (no such event in this partition).
    """
    bump = 1 if attempted else 0
    if tx.dialect == "postgres":
        params: tuple[Any, ...] = (ttl, key, owner, token, now, bump, bump, now, event_id)
        rows = tx.execute(_sql(_MARK_POSTGRES, tx), params)
    else:
        params = (now, bump, bump, now, event_id, key, owner, token)
        rows = tx.execute(_sql(_MARK_SQLITE, tx), params)
        if rows:
            renew(tx, key, owner, token, ttl)
    if rows:
        return "marked"
    return "unknown" if is_live(tx, key, owner, token) else "lost"


#: SQLite builds the partition index on first use (migration 0006 says why); PostgreSQL keeps
#: it from its first migration.
PARTITION_INDEX = "outbox_partition_pending"
_PARTITION_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PARTITION_INDEX} ON outbox (partition_key, seq) "
    "WHERE sent = 0 AND quarantined = 0"
)


def ensure_partition_index(tx: Tx) -> bool:
    """Build the index that ``pending_in_partition`` and ``claim`` read, if this SQLite outbox
    lacks it; True if it was built. A write transaction: one building is seen by all."""
    if tx.dialect != "sqlite":
        return False
    if tx.one("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (PARTITION_INDEX,)):
        return False
    tx.execute(_PARTITION_INDEX)
    return True


def pending_in_partition(tx: Tx, key: str, limit: int) -> list[dict[str, Any]]:
    # The WHERE clause matches the partial index outbox_partition_pending exactly.
    rows = tx.execute(
        "SELECT seq, id, sku, qty FROM outbox "
        "WHERE partition_key = ? AND sent = 0 AND quarantined = 0 ORDER BY seq LIMIT ?",
        (key, limit),
    )
    return [dict(zip(PENDING_COLUMNS, row, strict=True)) for row in rows]


def leases(tx: Tx) -> list[dict[str, Any]]:
    """Every lease row, live or not, by partition."""
    found = []
    for row in tx.execute(_sql(_LEASES, tx)):
        item = dict(zip(LEASE_COLUMNS, row, strict=True))
        item["live"] = bool(item["live"])
        found.append(item)
    return found
