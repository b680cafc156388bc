"""A leased partition's marks and reads at speed: a batch's lease-checked mark in one statement,
one read for several selections, marks committed behind the next send (``--pipeline``), and a
relay that never sleeps while it has work. Every lease rule must hold through all of them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ackledger import LeaseLost, Outbox
from ackledger.relay.leased_marks import LeasedMarksBehind
from ackledger.relay.leases import LeasedPartition, PartitionLeases
from ackledger.relay.partitions import PartitionWorker
from ackledger.source.dispatch import dispatch_batch_marking, dispatch_marking

from ..events import lab
from ..sends import partition_worker
from .conftest import Target
from .test_partitions import _run_until_drained, expire, fill


def pending_ids(target: Target) -> list[str]:
    sql = "SELECT id FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 ORDER BY seq"
    return [row[0] for row in target.rows(sql)]


def test_a_batch_mark_is_all_or_nothing_and_names_the_event_it_does_not_know(
    target: Target,
) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["p", "q"], 4)
        leases = PartitionLeases(ob, "one", ttl=60)
        lease = leases.claim()
        assert lease is not None and lease.partition == "p"
        before = target.dump()
        with pytest.raises(KeyError, match=ids["q"][0]):
            leases.mark_sent_many(lease, [ids["p"][0], ids["q"][0], ids["p"][1]])
        assert target.dump() == before  # the one known event was not marked either
        leases.mark_sent_many(lease, [ids["p"][0], ids["p"][1], ids["p"][0]])  # a repeat is one
    assert target.rows("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq") == [
        (ids["p"][0],),
        (ids["p"][1],),
    ]


def test_a_read_ahead_never_skips_an_event_that_was_handed_out_and_not_marked(
    target: Target,
) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["p"], 12)["p"]
        leases = PartitionLeases(ob, "one", ttl=60)
        lease = leases.claim()
        assert lease is not None
        view = LeasedPartition(leases, lease)
        assert [e["id"] for e in view.pending(4)] == ids[:4]
        view.mark_sent_many(ids[:4])
        assert [e["id"] for e in view.pending(4)] == ids[4:8]  # from the read ahead
        view.mark_sent_many(ids[4:6])  # a partial answer: 6 and 7 are still owed
        assert [e["id"] for e in view.pending(4)] == ids[6:10]
        # In flight (a pipelining relay's skip) counts as handed over, not owed.
        assert [e["id"] for e in view.pending_beyond(set(ids[6:10]), 2)] == ids[10:12]
        # An event published after the read is found once the read ahead runs short.
        with ob.transaction() as tx:
            tx.enqueue(lab("late-p", "p", 1))
        view.mark_sent_many(ids[6:12])
        assert [e["id"] for e in view.pending(4)] == ["late-p"]


def _leased_marks_behind(
    pair: tuple[Outbox, Outbox],
) -> tuple[list[str], PartitionLeases, LeasedMarksBehind, LeasedPartition]:
    """Six events of partition "p", leased by relay "one" with its marks behind; relay "two"
    is there to take the lease once it has lapsed."""
    reader, marker = pair
    ids = fill(reader, ["p"], 6)["p"]
    one, two = PartitionLeases(reader, "one", ttl=60), PartitionLeases(reader, "two", ttl=60)
    lease = one.claim()
    assert lease is not None
    return ids, two, LeasedMarksBehind(one, marker), LeasedPartition(one, lease)


def test_marks_behind_a_lost_lease_mark_nothing_and_surface_at_the_next_hand_over(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    ids, two, marks, view = _leased_marks_behind(pair)
    sent: list[list[str]] = []

    def send_batch(events: list[dict[str, Any]]) -> int:
        sent.append([e["id"] for e in events])
        if len(sent) == 2:
            marks.settle()  # the first batch's marks are in: the loss falls on the second's
            expire(target, "p")
            assert two.claim() is not None
        return len(events)

    try:
        assert dispatch_batch_marking(view, send_batch, 2, None, marks) == ids[0:2]
        assert dispatch_batch_marking(view, send_batch, 2, None, marks) == ids[2:4]
        with pytest.raises(LeaseLost):
            dispatch_batch_marking(view, send_batch, 2, None, marks)
    finally:
        marks.close()
    # The third batch went out (the loss was learnt at its hand-over); only the first, marked
    # under the live lease, is sent: the new owner sends the rest again, in order.
    assert sent == [ids[0:2], ids[2:4], ids[4:6]]
    assert pending_ids(target) == ids[2:]
    assert view.marked == 2


def test_per_item_marks_behind_a_lost_lease_mark_nothing_and_surface_at_the_next_hand_over(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    ids, two, marks, view = _leased_marks_behind(pair)
    sent: list[str] = []

    def send(event: dict[str, Any]) -> bool:
        sent.append(event["id"])
        if len(sent) == 3:
            marks.settle()  # the first two marks are in: the loss falls on the third's
            expire(target, "p")
            assert two.claim() is not None
        return True

    try:
        with pytest.raises(LeaseLost):
            dispatch_marking(view, send, 16, None, marks)
    finally:
        marks.close()
    # The fourth event went out (the loss was learnt at its hand-over); the two marked under
    # the live lease are sent, the new owner sends the rest again, in order.
    assert sent == ids[0:4]
    assert pending_ids(target) == ids[2:]
    assert view.marked == 2


def test_a_worker_with_pending_events_never_waits_between_rounds(target: Target) -> None:
    """Every idle wait of a lone worker draining many partitions comes after the last event
    (counted on the relay's own wait, with the outbox read from another connection)."""
    keys = [f"p{n}" for n in range(24)]
    with Outbox(target.ref) as ob:
        fill(ob, keys, 20)
    pending_at_waits: list[int] = []
    with Outbox(target.ref) as ob, Outbox(target.ref) as watcher:
        worker: PartitionWorker = partition_worker(
            ob, owner="w", send_batch=len, stop=threading.Event(), poll_interval=0.05,
            log=lambda _: None,
        )  # fmt: skip
        idle = worker.relay.idle
        wait = idle.wait

        def counted(seconds: float) -> None:
            pending_at_waits.append(watcher.stats()["pending"])
            wait(seconds)

        idle.wait = counted  # type: ignore[method-assign]
        _run_until_drained(ob, worker)
    assert worker.picker.report.sent == 24 * 20
    assert [n for n in pending_at_waits if n > 0] == []
