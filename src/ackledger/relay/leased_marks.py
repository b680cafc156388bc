"""A leasing relay's pipelined marks (``relay [--batch] --pipeline`` on leased partitions).

``MarksBehind`` (``source.marking``) with the lease rule kept: a wholly acknowledged batch's
marks (per item: one event's mark) are committed on a second connection while the next batch
(event) of the same partition is selected and sent, and each of those commits is the
lease-checked mark (owner, token and expiry checked, and the lease renewed, in the statement
that marks). A relay that lost its lease therefore marks nothing; it learns it at its next
hand-over or when its pick ends, which settles the marks before the lease is let go (a
released lease would refuse them).

What it costs: when the process dies, up to two batches (events) are acknowledged or in
flight and not yet marked (the one whose marks are being committed, and the one being sent),
where inline marks leave one. Both are re-sent and the consumer's inbox answers them as
duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..source.marking import MarksBehind
from .leases import LeasedPartition, PartitionLeases

if TYPE_CHECKING:
    from ..source.dispatch import Source
    from ..source.outbox import Outbox


class LeasedMarksBehind(MarksBehind):
    """``leases`` select (through each pick's ``LeasedPartition``); ``marker``, another Outbox
    on the same database, commits the lease-checked marks."""

    def __init__(self, leases: PartitionLeases, marker: Outbox) -> None:
        super().__init__(leases.outbox, marker)
        self._marks = PartitionLeases(marker, leases.owner, leases.ttl)
        self._view: LeasedPartition | None = None

    def _picked(self, outbox: Source) -> LeasedPartition:
        if not isinstance(outbox, LeasedPartition):
            raise TypeError("LeasedMarksBehind: the source must be a LeasedPartition")
        if outbox is not self._view:
            self.wait()  # another pick: the last one's marks first (its release settled them)
            self._view = outbox
        return outbox

    def select_rows(self, outbox: Source, limit: int) -> Sequence[Mapping[str, Any]]:
        return self._picked(outbox).pending_rows(self.inflight, limit)

    def _job(self, ids: list[str]) -> Any:
        return (self._view, ids)

    def _commit(self, job: Any) -> None:
        view, ids = job
        self._marks.mark_sent_many(view.lease, ids, attempted=True)
        view.marked += len(ids)
