"""Leasing partitions of an outbox: claim, renew, release, and marks that check the lease.

A partition is the set of outbox events that share a ``partition_key``: the event's
``partitionkey`` (the lab's events name their sku), or one shared partition for events that
name none. Events of one partition are sent in seq order by at most one relay at a time: the
one that holds the partition's lease. Each lease carries a fencing token larger than any
before it; a mark carries the token, and the database refuses it in the same statement if the
lease expired or another relay holds the partition now (:class:`~ackledger.LeaseLost`).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._core.exact import is_number
from .._core.timestamps import utc_timestamp
from ..errors import LeaseLost
from ..source.outbox import Outbox, check_limit
from ..store.pending import PendingRow, pending_events

#: Marks renew a lease many times a second while busy; a send's time-out (default 5 s) must
#: fit well inside it. A killed relay's partitions wait at most this long for a new holder.
DEFAULT_TTL = 10.0
MAX_TTL = 3600.0
#: Claimers that race for the same partition: the losers look again this many times.
CLAIM_TRIES = 3
#: A leased partition's read takes this many selections at once (``LeasedPartition``).
READ_AHEAD = 4


def lease_words(lease: Mapping[str, Any]) -> str:
    """``held by a lease of OWNER until TIME``: a partition only its lease's holder sends."""
    return f"held by a lease of {lease['owner']} until {utc_timestamp(lease['until'])}"


def check_owner(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 128:
        raise ValueError("owner: must be a string of 1-128 characters")
    if not value.isprintable() or not value.isascii():
        raise ValueError("owner: must be printable ASCII")
    return value


def default_owner() -> str:
    """A relay's lease owner name: the Pod's name in Kubernetes, else host and process id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def check_ttl(value: object, field: str = "lease_ttl") -> float:
    if not is_number(value):
        raise ValueError(f"{field}: must be a number of seconds, got {type(value).__name__}")
    if not (0 < value <= MAX_TTL) or math.isnan(value):
        raise ValueError(f"{field}: must be more than 0 and at most {MAX_TTL:g} seconds")
    return float(value)


@dataclass(frozen=True)
class Lease:
    partition: str
    owner: str
    token: int
    #: When the lease ends unless renewed, by the database's clock (seconds since the epoch).
    expires_at: float


class PartitionLeases:
    """The lease operations of one relay (``owner``) on one outbox."""

    def __init__(self, outbox: Outbox, owner: str, ttl: float = DEFAULT_TTL) -> None:
        self.outbox = outbox
        self.owner = check_owner(owner)
        self.ttl = check_ttl(ttl)
        # A SQLite outbox gets its partition index on the first lease user, not before: the
        # single relay loop never reads it, and keeping it costs every mark (migration 0006).
        with outbox.backend.write() as tx:
            tx.lease_ensure_partition_index()

    def claim(self) -> Lease | None:
        """Lease the partition whose oldest pending event is oldest among those nobody holds.

        Returns None when every partition with pending events is held by a live lease.
        """
        # A claim or a release need not wait for the disk (a durable commit costs the relay a
        # WAL flush each): if a server crash forgets one, the relay's next mark, a durable
        # commit that checks the lease, finds the lease row as it was and marks nothing; and
        # that commit makes every earlier one durable too.
        for _ in range(CLAIM_TRIES):
            with self.outbox.backend.write(durable=False) as tx:
                found = tx.lease_claim(self.owner, self.ttl)
                # Nothing taken: either there is nothing to take, or another relay took the
                # candidate first (then look again, a few times).
                if found is None and not tx.lease_unleased_work():
                    return None
            if found is not None:
                key, token, expires_at = found
                return Lease(key, self.owner, token, expires_at)
        return None

    def renew(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend the lease to now + ttl (default: this relay's ttl); raises LeaseLost."""
        seconds = self.ttl if ttl is None else check_ttl(ttl, "ttl")
        with self.outbox.backend.statements() as tx:  # one statement, all or nothing
            expires_at = tx.lease_renew(lease.partition, lease.owner, lease.token, seconds)
        if expires_at is None:
            raise _lost(lease)
        return replace(lease, expires_at=expires_at)

    def release(self, lease: Lease) -> bool:
        """Let the partition go now; False if the lease had already ended."""
        with self.outbox.backend.write(durable=False) as tx:  # see claim
            return tx.lease_release(lease.partition, lease.owner, lease.token)

    def pending_in_partition(
        self, partition: str, limit: int = 16, skip: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """A partition's unsent, unquarantined events in seq order, without those in ``skip``
        (sent, their marks still being committed: a pipelining relay's). Writes nothing."""
        check_limit(limit)
        if not isinstance(partition, str):
            raise TypeError(f"partition: must be a string, got {type(partition).__name__}")
        return pending_events(self.read_ahead(partition, limit, skip))

    def read_ahead(
        self, partition: str, count: int, skip: Collection[str] = ()
    ) -> list[PendingRow]:
        """``pending_in_partition`` for any ``count`` (a view's read of several selections), as
        the rows read (``Outbox.pending_rows``)."""
        with self.outbox.backend.lookup() as tx:  # one statement (Outbox.pending_rows)
            rows = tx.lease_pending(partition, count + len(skip))
        if not skip:
            return rows
        return [row for row in rows if row.id not in skip][:count]

    def mark_sent(
        self, lease: Lease, event_id: str, *, attempted: bool = False, durable: bool = True
    ) -> None:
        """Mark an event of the leased partition sent, and renew the lease.

        Raises LeaseLost (nothing marked) if the lease expired or was taken over, KeyError if
        the partition has no such event.
        """
        self.mark_sent_many(lease, [event_id], attempted=attempted, durable=durable)

    def mark_sent_many(
        self,
        lease: Lease,
        event_ids: Sequence[str],
        *,
        attempted: bool = False,
        durable: bool = True,
    ) -> None:
        """Mark several events in one transaction and one statement: all of them, or none."""
        ids = list(event_ids)
        for event_id in ids:
            if not isinstance(event_id, str):
                raise TypeError(f"event_id: must be a string, got {type(event_id).__name__}")
        backend = self.outbox.backend
        # A relaxed mark needs its transaction (to commit without waiting for the disk).
        with backend.statements() if durable else backend.write(durable=False) as tx:
            outcome = tx.lease_mark_sent_many(
                lease.partition, lease.owner, lease.token, ids,
                ttl=self.ttl, attempted=attempted, now=time.time(),
            )  # fmt: skip
            if outcome == "lost":
                raise _lost(lease)
            if outcome == "unknown":
                raise KeyError(tx.lease_first_stranger(lease.partition, ids))

    def leases(self) -> list[dict[str, Any]]:
        """Every lease row (live or ended) of this outbox, by partition."""
        with self.outbox.backend.read() as tx:
            return tx.lease_rows()


def _lost(lease: Lease) -> LeaseLost:
    return LeaseLost(
        f"lease on partition {lease.partition!r} (token {lease.token}) expired or was taken "
        f"over; {lease.owner!r} may no longer mark its events"
    )


class LeasedPartition:
    """One partition under a lease, in the shape ``ackledger.dispatch`` reads and marks.

    ``dispatch(LeasedPartition(leases, lease), send)`` keeps every rule of dispatch (order,
    copies, exact ACK, stop at the first failure) and adds one: a mark raises LeaseLost when
    the lease is gone, so a relay that lost its partition stops at its next mark.

    One read takes up to ``READ_AHEAD`` selections; the next ones come from it for as long as
    every event handed out was marked (or is being marked, ``skip``). Nobody else sends this
    partition's events while the lease holds, so those rows stay pending; an operator's
    quarantine in between may let one of them be sent once more (its mark then leaves it held).
    """

    def __init__(self, leases: PartitionLeases, lease: Lease) -> None:
        self.leases = leases
        self.lease = lease
        #: How many events this view has marked sent (also when a later mark failed).
        self.marked = 0
        self._ahead: list[PendingRow] = []
        # Handed out, neither marked nor known to be in flight: a read ahead is only good
        # while this is empty (else the next selection must start at them again).
        self._owed: set[str] = set()

    @property
    def partition(self) -> str:
        return self.lease.partition

    def pending(self, limit: int = 16) -> list[dict[str, Any]]:
        return self.pending_beyond((), limit)

    def pending_beyond(self, skip: Collection[str], limit: int = 16) -> list[dict[str, Any]]:
        """``pending(limit)`` without the events in ``skip`` (see ``pending_in_partition``)."""
        return pending_events(self.pending_rows(skip, limit))

    def pending_rows(self, skip: Collection[str], limit: int = 16) -> list[PendingRow]:
        """``pending_beyond`` as the rows read (``Outbox.pending_rows``)."""
        check_limit(limit)
        if self._owed.difference(skip) or len(self._ahead) < limit:
            self._ahead = self.leases.read_ahead(self.lease.partition, limit * READ_AHEAD, skip)
        chosen, self._ahead = self._ahead[:limit], self._ahead[limit:]
        self._owed = {item.id for item in chosen}
        return chosen

    def mark_sent(self, event_id: str, *, attempted: bool = False, durable: bool = True) -> None:
        self.leases.mark_sent(self.lease, event_id, attempted=attempted, durable=durable)
        self._owed.discard(event_id)
        self.marked += 1

    def mark_sent_many(
        self, event_ids: Sequence[str], *, attempted: bool = False, durable: bool = True
    ) -> None:
        self.leases.mark_sent_many(self.lease, event_ids, attempted=attempted, durable=durable)
        self._owed.difference_update(event_ids)
        self.marked += len(event_ids)

    def record_failure(self, event_id: str, error: str) -> None:
        self._ahead = []
        self.leases.outbox.record_failure(event_id, error)

    # The relay's poison policy: the outbox's own operations (an operator's hold needs no lease).
    def amend_error(self, event_id: str, error: str) -> None:
        self._ahead = []
        self.leases.outbox.amend_error(event_id, error)

    def quarantine(self, event_id: str, reason: str) -> int:
        self._ahead = []
        return self.leases.outbox.quarantine(event_id, reason)

    def renew(self, ttl: float | None = None) -> None:
        self.lease = self.leases.renew(self.lease, ttl)

    def release(self) -> bool:
        return self.leases.release(self.lease)
