"""Partition leases, and a partition's pending events.

A lease row says which relay (``owner``) may send a partition's events, until when
(``expires_at``), under which fencing token. Expiry is judged by the *database's* clock, so
relays on machines whose clocks disagree still agree on who holds what. Every new lease takes a
token larger than any before it (each dialect's ``NEXT_FENCE``).

The two rules that make a lease safe are each one statement:

- a claim takes a partition only if it has no live lease: an ``INSERT ... ON CONFLICT DO UPDATE
  ... WHERE expired``. Two relays that race for one partition queue on its row; the second
  then sees the first one's live lease and takes nothing (PostgreSQL re-checks the ``WHERE``
  against the row the first one committed). This is the "equivalent" of ``FOR UPDATE SKIP
  LOCKED``: a claimer never waits for more than another claim's one-statement transaction.
- a mark under a lease checks owner, token and expiry in the statement that marks (each
  dialect's ``MARK_UNDER_LEASE``).
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Sequence
from typing import Any

from .counters import CounterQueries
from .pending import PENDING_SELECT, PendingRow, pending_rows

# The partition of the oldest pending event that has no live lease. Reading the pending index
# in seq order, rows of held partitions are skipped one by one: with a few held partitions
# that is a few rows. ``{now}`` and ``{token}`` are the dialect's CLOCK and NEXT_FENCE.
_CANDIDATE = """
clock AS (SELECT {now} AS now),
candidate AS (
    SELECT o.partition_key FROM ackledger_outbox o
    WHERE o.sent = 0 AND o.quarantined = 0
      AND NOT EXISTS (
          SELECT 1 FROM ackledger_partition_leases l, clock
          WHERE l.partition_key = o.partition_key AND l.expires_at > clock.now)
    ORDER BY o.seq LIMIT 1
)"""

_CLAIM = (
    "WITH"
    + _CANDIDATE
    + """
INSERT INTO ackledger_partition_leases
    (partition_key, owner, token, acquired_at, renewed_at, expires_at)
SELECT candidate.partition_key, ?, {token}, clock.now, clock.now, clock.now + ?
FROM candidate, clock WHERE true
ON CONFLICT (partition_key) DO UPDATE SET
    owner = excluded.owner, token = excluded.token, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE ackledger_partition_leases.expires_at <= excluded.acquired_at
RETURNING partition_key, token, expires_at
"""
)

_UNLEASED = "WITH" + _CANDIDATE + "\nSELECT partition_key FROM candidate"

_RENEW = """
UPDATE ackledger_partition_leases SET renewed_at = {now}, expires_at = {now} + ?
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
RETURNING expires_at
"""

_RELEASE = """
UPDATE ackledger_partition_leases SET expires_at = {now}
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
RETURNING token
"""

_IS_LIVE = """
SELECT 1 FROM ackledger_partition_leases
WHERE partition_key = ? AND owner = ? AND token = ? AND expires_at > {now}
"""

_LEASES = """
SELECT partition_key, owner, token, acquired_at, renewed_at, expires_at,
    CASE WHEN expires_at > {now} THEN 1 ELSE 0 END
FROM ackledger_partition_leases ORDER BY partition_key
"""

# Live leases over partitions with pending events: what holds those events back from every
# relay but the holder (a holder killed holds them until the lease ends).
_HELD = """
SELECT l.partition_key, l.owner, l.expires_at, l.token, {now} - l.renewed_at, COUNT(o.seq)
FROM ackledger_partition_leases l
JOIN ackledger_outbox o
  ON o.partition_key = l.partition_key AND o.sent = 0 AND o.quarantined = 0
WHERE l.expires_at > {now}
GROUP BY l.partition_key, l.owner, l.expires_at, l.token, l.renewed_at
ORDER BY l.partition_key
"""

_HOLDING = """
SELECT l.partition_key, l.owner, l.expires_at, l.token, {now} - l.renewed_at
FROM ackledger_partition_leases l
JOIN ackledger_outbox o ON o.partition_key = l.partition_key
WHERE o.id = ? AND l.expires_at > {now}
"""

HELD_COLUMNS = ("partition", "owner", "until", "token", "unrenewed_s", "pending")

_IN_PARTITION = "SELECT 1 FROM ackledger_outbox WHERE id = ? AND partition_key = ?"

LEASE_COLUMNS = ("partition", "owner", "token", "acquired_at", "renewed_at", "expires_at", "live")


@functools.lru_cache(maxsize=64)
def _render(template: str, now: str, token: str) -> str:
    return template.format(now=now, token=token)


class LeaseQueries(CounterQueries):
    #: The database's clock, in seconds since the epoch, and where a new lease's token comes
    #: from: SQL expressions each dialect gives.
    CLOCK: str
    NEXT_FENCE: str

    def _lease_sql(self, template: str) -> str:
        """A lease statement with this dialect's clock and token source."""
        return _render(template, self.CLOCK, self.NEXT_FENCE)

    def lease_claim(self, owner: str, ttl: float) -> tuple[str, int, float] | None:
        """Lease the partition of the oldest pending event that nobody holds; None if there is
        none (or another relay took it first). Returns (partition, token, expires_at)."""
        row = self.one(self._lease_sql(_CLAIM), (owner, ttl))
        if row is None:
            return None
        key, token, expires_at = str(row[0]), int(row[1]), float(row[2])
        self._lease_token_taken(token)
        return key, token, expires_at

    def _lease_token_taken(self, token: int) -> None:
        """A dialect whose ``NEXT_FENCE`` reads a counter stores the new token back here."""

    def lease_unleased_work(self) -> bool:
        """Is there a partition with pending events and no live lease?"""
        return self.one(self._lease_sql(_UNLEASED)) is not None

    def lease_renew(self, key: str, owner: str, token: int, ttl: float) -> float | None:
        """Extend a live lease to now + ttl; returns the new expiry, or None if it is not live."""
        value = self.scalar(self._lease_sql(_RENEW), (ttl, key, owner, token))
        return None if value is None else float(value)

    def lease_release(self, key: str, owner: str, token: int) -> bool:
        """End a live lease now; False if it was not live any more."""
        return self.one(self._lease_sql(_RELEASE), (key, owner, token)) is not None

    def lease_is_live(self, key: str, owner: str, token: int) -> bool:
        return self.one(self._lease_sql(_IS_LIVE), (key, owner, token)) is not None

    def lease_mark_sent_many(
        self,
        key: str,
        owner: str,
        token: int,
        event_ids: Sequence[str],
        *,
        ttl: float,
        attempted: bool,
        now: float,
    ) -> str:
        """Mark events of the partition sent if the lease is live (and renew it).

        Returns ``"marked"`` if every one was marked, ``"lost"`` (the lease is not live) or
        ``"unknown"`` (an id is no event of this partition); the caller rolls back on either,
        as a dialect that marks one statement at a time may have marked some.
        """
        wanted = len(set(event_ids))
        marked = self._mark_many_under_lease(
            key, owner, token, event_ids, ttl=ttl, bump=1 if attempted else 0, now=now
        )
        if marked == wanted:
            return "marked"
        return "unknown" if self.lease_is_live(key, owner, token) else "lost"

    def lease_first_stranger(self, key: str, event_ids: Sequence[str]) -> str:
        """The first of ``event_ids`` that is no event of the partition (a failed mark's
        KeyError names it); the first id if all of them are."""
        for event_id in event_ids:
            if self.one(_IN_PARTITION, (event_id, key)) is None:
                return event_id
        return event_ids[0]

    @abc.abstractmethod
    def _mark_many_under_lease(
        self,
        key: str,
        owner: str,
        token: int,
        event_ids: Sequence[str],
        *,
        ttl: float,
        bump: int,
        now: float,
    ) -> int:
        """Mark the (distinct) events and renew the lease if it is live; how many were marked
        (each dialect's ``MARK_UNDER_LEASE``)."""

    @abc.abstractmethod
    def lease_ensure_partition_index(self) -> bool:
        """Build the index that ``lease_pending`` and ``lease_claim`` read if the database
        lacks it; True if it was built. A write transaction: one building is seen by all."""

    def lease_pending(self, key: str, limit: int) -> list[PendingRow]:
        """A partition's unsent, unquarantined events in seq order."""
        # The WHERE clause matches the partial index outbox_partition_pending exactly.
        rows = self.execute(
            f"SELECT {PENDING_SELECT} FROM ackledger_outbox "
            "WHERE partition_key = ? AND sent = 0 AND quarantined = 0 ORDER BY seq LIMIT ?",
            (key, limit),
        )
        return pending_rows(rows)

    def lease_held(self) -> list[dict[str, Any]]:
        """Live leases of partitions with pending events, each with how many it holds."""
        rows = self.execute(self._lease_sql(_HELD))
        return [dict(zip(HELD_COLUMNS, row, strict=True)) for row in rows]

    def lease_holding(self, event_id: str) -> dict[str, Any] | None:
        """The live lease on the partition of event ``event_id`` (by id), or None."""
        row = self.one(self._lease_sql(_HOLDING), (event_id,))
        return None if row is None else dict(zip(HELD_COLUMNS[:5], row, strict=True))

    def lease_rows(self) -> list[dict[str, Any]]:
        """Every lease row, live or not, by partition."""
        found = []
        for row in self.execute(self._lease_sql(_LEASES)):
            item = dict(zip(LEASE_COLUMNS, row, strict=True))
            item["live"] = bool(item["live"])
            found.append(item)
        return found
