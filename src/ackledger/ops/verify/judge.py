"""The verdict on one schedule, from what both databases hold once the relay has drained.

Each event adds 1 to a sku of its own (its id), so the inventory says per event how often it
was applied: 0 and no longer pending is lost, more than 1 is double-applied. Pending (or
quarantined) after the drain is stuck. Within a partition the sink's first arrivals must
follow the outbox's seq: an event that arrived first before an earlier one of its partition
is reordered.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ... import warehouse
from ...store import Tx, open_backend


@dataclass
class Counts:
    events: int = 0
    kills: int = 0
    lost: int = 0
    double_applied: int = 0
    stuck: int = 0
    reordered: int = 0
    #: Up to a few ids per problem, for the report.
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.double_applied or self.stuck or self.reordered)

    def add(self, other: Counts) -> None:
        for name in ("events", "kills", "lost", "double_applied", "stuck", "reordered"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class Sides:
    #: The run's outbox rows in seq order (``verify_outbox_rows``).
    outbox: list[dict[str, Any]]
    stock: dict[str, int]
    arrivals: dict[str, int]


def read_sides(source: str, sink: str, tag: str) -> Sides:
    """Both sides, each on a connection of its own, opened after the processes stopped."""
    with _reading(source) as tx:
        outbox = tx.verify_outbox_rows(tag)
    with _reading(sink, lab=True) as tx:
        return Sides(outbox, warehouse.stock_like(tx, tag), tx.verify_arrivals(tag))


@contextmanager
def _reading(target: str, *, lab: bool = False) -> Iterator[Tx]:
    backend = open_backend(target, migrate_schema=False)
    try:
        if lab:
            backend.ensure_plugin(warehouse.TYPE)  # the sink's stock is the lab's table
        with backend.read() as tx:
            yield tx
    finally:
        backend.close()


def judge(sides: Sides, expected: int) -> Counts:
    counts = Counts(events=expected)
    examples: dict[str, list[str]] = defaultdict(list)

    def note(problem: str, event_id: str) -> None:
        if len(examples[problem]) < 5:
            examples[problem].append(event_id)

    by_partition: dict[str, list[str]] = defaultdict(list)
    for row in sides.outbox:
        event_id, applied = str(row["id"]), sides.stock.get(str(row["id"]), 0)
        if not row["sent"] or row["quarantined"]:
            counts.stuck += 1
            note("stuck", event_id)
        elif applied == 0:
            counts.lost += 1
            note("lost", event_id)
        if applied > 1:
            counts.double_applied += 1
            note("double_applied", event_id)
        by_partition[str(row["partition"])].append(event_id)
    # Accepted rows that the outbox no longer has are lost too (nothing here deletes any).
    missing = expected - len(sides.outbox)
    counts.lost += max(0, missing)
    for ids in by_partition.values():
        latest = 0
        for event_id in ids:
            arrival = sides.arrivals.get(event_id)
            if arrival is None:
                continue
            if arrival < latest:
                counts.reordered += 1
                note("reordered", event_id)
            latest = max(latest, arrival)
    counts.examples = dict(examples)
    return counts
