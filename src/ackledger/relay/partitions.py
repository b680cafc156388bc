"""Many relays on one outbox: partitions, leases with fencing tokens, and the worker.

Order is kept within a partition (events with the same ``partitionkey``; events without one
share one partition): one relay at a time sends them, in seq order, with dispatch's
stop-at-the-first-failure rule. Across partitions nothing is ordered. See docs/postgres.md.

Run one: ``ackledger relay --source postgresql://... --to URL --owner NAME``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..source.outbox import Outbox
from ..wire.sender import Sender
from .leases import Lease, LeasedPartition, PartitionLeases
from .loop import Relay, Stop
from .pickers import LeasedPartitions, WorkerReport, report_of
from .settings import RelaySettings

__all__ = [
    "Lease",
    "LeasedPartition",
    "PartitionLeases",
    "PartitionWorker",
    "WorkerReport",
]


class PartitionWorker:
    """One of N relays in your process: the relay loop on :class:`LeasedPartitions`.

    ``settings.owner`` names it in lease rows; ``wire`` sends (``wire.sender`` shape);
    setting ``stop`` ends it after the send in flight, its lease released; ``log``, if given,
    gets each line as ``"OWNER: text"``; ``after_delivery`` as in :class:`Relay`; ``marker``
    (another Outbox on the same database) commits the marks with ``settings.pipeline``.
    """

    def __init__(
        self,
        outbox: Outbox,
        settings: RelaySettings,
        wire: Sender,
        *,
        stop: Stop | None = None,
        log: Callable[[str], None] | None = None,
        after_delivery: Callable[[str], object] | None = None,
        marker: Outbox | None = None,
    ) -> None:
        self.picker = LeasedPartitions(outbox, settings, marker)
        self.settings = settings
        if log is not None:
            log = _prefixed(f"{settings.owner}: ", log)
        self.relay = Relay(
            self.picker, wire=wire, stop=stop, log=log, after_delivery=after_delivery
        )
        self.stop = self.relay.stop
        #: Send figures of this process, in the relay's shape (its metrics read them).
        self.counts = self.relay.counts

    def run(self) -> WorkerReport:
        self.relay.run()
        return report_of(self.picker, self.relay.quarantined, self.relay.poisoned)


def _prefixed(prefix: str, log: Callable[[str], None]) -> Callable[[str], None]:
    def prefixed(line: str) -> None:
        log(prefix + line)

    return prefixed
