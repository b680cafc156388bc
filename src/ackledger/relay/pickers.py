"""What the relay loop sends from: the whole outbox, or one leased partition at a time.

The loop (``relay.loop``) asks its picker for a *pick*, runs dispatch rounds on the pick's
``source`` and tells the pick how they ended. A pick owns what differs between the two:

- :class:`WholeOutbox` (SQLite, or ``--single`` on PostgreSQL): one pick, the outbox itself,
  one round at a time; a failure makes the loop wait out the backoff before the next round.
- :class:`LeasedPartitions` (one of N relays): each pick is a partition leased for up to
  ``BATCHES_PER_LEASE`` rounds (each mark renews it), released when drained. A failure
  *parks* the partition (its lease kept, unrenewed, for its own backoff) and the loop turns
  to other partitions at once, so a failing partition never stops the others. A crashed
  relay's leases end by expiry (``lease_ttl``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from .._core.backoff import Backoff
from ..errors import LeaseLost
from ..source.dispatch import Source
from ..source.marking import Marking, MarksBehind, marking_for
from ..source.outbox import Outbox
from ..store.pending import PendingRow
from .leased_marks import LeasedMarksBehind
from .leases import Lease, LeasedPartition, PartitionLeases, lease_words
from .policy import Failure
from .settings import RelaySettings

BATCHES_PER_LEASE = 16
#: A lease unrenewed this long is told of by a relay that waits for it (a live holder
#: renews at every mark, many times a second while busy).
STALE_AFTER_S = 1.0


class RelaySource(Source, Protocol):
    """What the loop reads, marks and quarantines in: an ``Outbox`` or a ``LeasedPartition``."""

    def amend_error(self, event_id: str, error: str) -> None: ...

    def pending_rows(self, skip: Collection[str], limit: int = ...) -> list[PendingRow]: ...

    def quarantine(self, event_id: str, reason: str) -> int: ...


class Note(Protocol):
    """The loop's one way to log a line (it adds the picker's ``fields``)."""

    def __call__(self, level: int, event: str, message: str, **fields: object) -> None: ...


class Pick(Protocol):
    """One thing the loop sends from, until it is drained, fails or has had its turn."""

    source: RelaySource
    #: This pick's failure schedule; ``failures`` is its failed rounds in a row.
    backoff: Backoff
    #: Added to every log line about this pick (``partition``).
    fields: dict[str, object]

    def again(self, marked: list[str]) -> bool:
        """After a round: True to go on with another round now, False when done."""

    def release(self) -> None:
        """Done with it (drained, had its turn, stopped, or its poison event handled)."""

    def park(self, delay: float, note: Note) -> float:
        """A failed round: returns how long the loop waits before its next round."""

    def lost(self, exc: LeaseLost, note: Note) -> None:
        """A mark was refused: the pick has another owner now."""

    def recovered(self) -> None:
        """A round marked events after failed ones: forget them."""

    def done(self) -> None:
        """Called last, however the pick ended."""


class Picker(Protocol):
    settings: RelaySettings
    #: The outbox it picks from (the relay listens on its database when idle).
    outbox: Outbox
    #: Added to every log line of the relay (``owner``).
    fields: dict[str, object]

    def started(self) -> tuple[str, dict[str, object]]:
        """The ``started`` line's text and its last fields."""

    def marking(self) -> Marking:
        """How dispatch marks what was acknowledged, for the relay's whole run."""

    def pick(self, note: Note) -> Pick | None:
        """The next thing to send from; None when there is nothing to do (the loop polls)."""

    def unreachable(self, exc: Exception, note: Note) -> float:
        """The store failed outside a round: how long to wait, or raise to end the relay."""

    def stopped(self, note: Note) -> None:
        """The relay stops cleanly: let go of whatever it still holds."""


class WholeOutbox:
    """The single loop's picker: every pick is the whole outbox, one round at a time."""

    def __init__(self, outbox: Outbox, settings: RelaySettings, marker: Outbox | None = None):
        if settings.pipeline and marker is None:
            raise ValueError("pipeline: needs a marker Outbox")
        self.settings = settings
        self.fields: dict[str, object] = {}
        self.outbox = outbox
        self.source: RelaySource = outbox
        self.backoff = settings.backoff(settings.rng())
        self._marker = marker

    def started(self) -> tuple[str, dict[str, object]]:
        return f"relaying to {self.settings.shown_url}", {"pending": self.outbox.stats()["pending"]}

    def marking(self) -> Marking:
        if self._marker is not None and self.settings.pipeline:
            return MarksBehind(self.outbox, self._marker)
        return marking_for(self.settings.mark_sync)

    def pick(self, note: Note) -> WholeOutbox:
        return self

    def unreachable(self, exc: Exception, note: Note) -> float:
        raise exc  # the single loop has always let these end the relay

    def stopped(self, note: Note) -> None:
        pass

    def again(self, marked: list[str]) -> bool:
        return False  # the loop picks again: polls when nothing was marked

    def release(self) -> None:
        pass

    def park(self, delay: float, note: Note) -> float:
        return delay

    def lost(self, exc: LeaseLost, note: Note) -> None:
        raise exc  # no lease, so never raised

    def recovered(self) -> None:
        self.backoff.reset()

    def done(self) -> None:
        pass


@dataclass
class WorkerReport:
    """What one leasing relay did, for its final line (``ackledger relay``) and for tests."""

    owner: str
    sent: int = 0
    leases: int = 0
    lost: int = 0
    failures: int = 0
    lost_partitions: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    #: The event that stopped the relay under ``on_poison="stop"``, and why.
    poisoned: str | None = None


class LeasedPartitions:
    """One of N relays: picks are leased partitions (``settings.owner`` names the leases)."""

    def __init__(
        self, outbox: Outbox, settings: RelaySettings, marker: Outbox | None = None
    ) -> None:
        if settings.owner is None:
            raise ValueError("owner: a partition worker needs a name for its lease rows")
        if settings.pipeline and marker is None:
            raise ValueError("pipeline: needs a marker Outbox")
        self.settings = settings
        self.outbox = outbox
        self.leases = PartitionLeases(outbox, settings.owner, settings.lease_ttl)
        self.fields: dict[str, object] = {"owner": settings.owner}
        self.report = WorkerReport(settings.owner)
        self._rng = settings.rng() or random.Random()
        # One schedule per parked partition (a success forgets it), one for the database.
        self.parked: dict[str, Backoff] = {}
        #: The leases kept, unrenewed, on parked partitions: released when the relay stops.
        self.parked_leases: dict[str, Lease] = {}
        self._database = self.new_backoff()
        self._marker = marker
        #: The marking strategy handed to the loop (a pick settles it before its release).
        self.marks: Marking = marking_for(settings.mark_sync)
        #: The other relays' leases already told of (partition, token): one line each.
        self._told: set[tuple[str, int]] = set()

    def new_backoff(self) -> Backoff:
        return self.settings.backoff(self._rng)

    def started(self) -> tuple[str, dict[str, object]]:
        return f"leasing partitions of {self.outbox.backend.location}", {}

    def marking(self) -> Marking:
        # Inline (each, last), or behind the next send with --pipeline; every mark checks the
        # lease either way.
        if self._marker is not None and self.settings.pipeline:
            self.marks = LeasedMarksBehind(self.leases, self._marker)
        return self.marks

    def pick(self, note: Note) -> _Partition | None:
        lease = self.leases.claim()
        self._database.reset()
        if lease is None:
            self._tell_held(note)
            return None
        self.report.leases += 1
        return _Partition(self, lease)

    def _tell_held(self, note: Note) -> None:
        """Say once per lease why pending events wait: another relay's lease that is not
        being renewed (its relay died, parked the partition after a failure, or waits on a
        slow send)."""
        held = [
            lease for lease in self.outbox.held_by_leases() if lease["owner"] != self.settings.owner
        ]
        # Forget the leases that ended: the set stays as small as the leases alive.
        self._told.intersection_update((lease["partition"], lease["token"]) for lease in held)
        for lease in held:
            key = (lease["partition"], lease["token"])
            if key in self._told or lease["unrenewed_s"] < STALE_AFTER_S:
                continue
            self._told.add(key)
            note(
                logging.WARNING, "lease-held",
                f"partition {lease['partition']!r} waits: {lease_words(lease)}, not renewed "
                f"for {lease['unrenewed_s']:.0f}s (its relay died, backs off or waits on a "
                "slow send); taken over when it ends",
                partition=lease["partition"], holder=lease["owner"], pending=lease["pending"],
            )  # fmt: skip

    def stopped(self, note: Note) -> None:
        # A parked partition's lease would hold it for the rest of its backoff: let it go, so
        # another relay retries it as soon as its backoff would have let this one.
        for lease in self.parked_leases.values():
            try:
                self.leases.release(lease)
            except Exception as exc:  # it ends by itself anyway; the stop must not fail
                note(
                    logging.WARNING,
                    "release-failed",
                    f"could not release {lease.partition!r}: {exc}",
                )
        self.parked_leases.clear()

    def unreachable(self, exc: Exception, note: Note) -> float:
        self.report.failures += 1
        wait = self._database.next_delay()
        note(
            logging.WARNING, "database-error",
            f"database error: {type(exc).__name__}: {exc}; retrying in {wait:.2f}s",
        )  # fmt: skip
        return wait


class _Partition:
    """One leased partition as a pick."""

    def __init__(self, picker: LeasedPartitions, lease: Lease) -> None:
        self._picker = picker
        self.view = LeasedPartition(picker.leases, lease)
        self.source: RelaySource = self.view
        key = lease.partition
        picker.parked_leases.pop(key, None)  # its park ended: this lease is a new one
        self.backoff = picker.parked.get(key) or picker.new_backoff()
        self.fields: dict[str, object] = {"partition": key}
        self._rounds = 0

    def again(self, marked: list[str]) -> bool:
        # A round of --inflight sends several batches: each counts as one of the turn's.
        self._rounds += max(1, -(-len(marked) // self._picker.settings.limit))
        # No renewal here: every mark under the lease renewed it in the statement that marked.
        return len(marked) >= self._picker.settings.limit and self._rounds < BATCHES_PER_LEASE

    def release(self) -> None:
        # Marks still being committed need the lease: they land (or fail) before it goes.
        self._picker.marks.settle()
        self.view.release()

    def park(self, delay: float, note: Note) -> float:
        """Keep the lease, unrenewed, for ``delay``: nobody retries the partition before
        then, and the loop turns to other partitions at once."""
        self._picker.report.failures += 1
        self._picker.parked[self.view.partition] = self.backoff
        try:
            self.view.renew(delay)
            self._picker.parked_leases[self.view.partition] = self.view.lease
        except Exception as exc:  # the lease is gone or the database is: either way, move on
            note(logging.WARNING, "park-failed", f"could not park {self.view.partition!r}: {exc}")
        return 0.0

    def lost(self, exc: LeaseLost, note: Note) -> None:
        report = self._picker.report
        report.lost += 1
        report.lost_partitions.append(self.view.partition)
        note(logging.WARNING, "lease-lost", f"lease lost: {exc}", **self.fields)

    def recovered(self) -> None:
        self.backoff.reset()
        self._picker.parked.pop(self.view.partition, None)

    def done(self) -> None:
        self._picker.report.sent += self.view.marked


def report_of(
    picker: LeasedPartitions, quarantined: list[str], poisoned: Failure | None
) -> WorkerReport:
    """The picker's report, completed with what the loop quarantined or stopped on."""
    report = picker.report
    report.quarantined = quarantined
    if poisoned is not None:
        report.poisoned = f"{poisoned.event_id or '?'}: {poisoned.message}"
    return report
