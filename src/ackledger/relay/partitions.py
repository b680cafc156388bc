"""Many relays on one outbox: partitions, leases with fencing tokens, and the worker loop.

Order is kept within a partition (events with the same ``partition_key``, by default the
event's sku): one relay at a time sends them, in seq order, with dispatch's
stop-at-the-first-failure rule. Across partitions nothing is ordered. See docs/postgres.md.

Run one: ``ackledger relay --source postgresql://... --to URL --owner NAME``.
"""

from .leases import Lease, LeasedPartition, PartitionLeases
from .partition_worker import PartitionWorker, WorkerReport

__all__ = [
    "Lease",
    "LeasedPartition",
    "PartitionLeases",
    "PartitionWorker",
    "WorkerReport",
]
