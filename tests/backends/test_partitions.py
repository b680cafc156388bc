"""Partition leases and the partition worker, in-process, on every backend."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

import pytest

from ackledger import LeaseLost, NotAcknowledged, Outbox, dispatch
from ackledger.relay.loop import logger as relay_logger
from ackledger.relay.partitions import LeasedPartition, PartitionLeases, PartitionWorker

from ..events import lab
from ..sends import partition_worker
from .conftest import Target


def fill(ob: Outbox, partitions: list[str], per_partition: int) -> dict[str, list[str]]:
    """Events interleaved across partitions; ids sort against seq order. Returns ids by key."""
    ids: dict[str, list[str]] = defaultdict(list)
    with ob.transaction() as tx:
        for _ in range(per_partition):
            for key in partitions:
                event_id = f"{999_999 - len(ids[key]) - 1000 * partitions.index(key)}-{key}"
                tx.enqueue(lab(event_id, key, 1))  # its partitionkey is the sku
                ids[key].append(event_id)
    return ids


def expire(target: Target, partition: str) -> None:
    # The test's hand on the clock: the lease is over now, whoever holds it.
    target.execute(
        "UPDATE ackledger_partition_leases SET expires_at = 0 WHERE partition_key = ?", (partition,)
    )


def test_claims_take_the_oldest_unheld_partitions_one_owner_each(target: Target) -> None:
    with Outbox(target.ref) as ob:
        fill(ob, ["p-b", "p-a", "p-c"], 2)
        ob.accept({"id": "done", "sku": "p-sent", "qty": 1})
        ob.mark_sent("done")
        one, two = PartitionLeases(ob, "one"), PartitionLeases(ob, "two")
        first, second, third = one.claim(), two.claim(), one.claim()
        assert first is not None and second is not None and third is not None
        assert [first.partition, second.partition, third.partition] == ["p-b", "p-a", "p-c"]
        assert first.token < second.token < third.token
        assert two.claim() is None  # everything with pending events is held
        assert (first.owner, second.owner) == ("one", "two")


def test_a_new_lease_always_has_a_larger_token(target: Target) -> None:
    with Outbox(target.ref) as ob:
        fill(ob, ["p"], 3)
        one, two = PartitionLeases(ob, "one"), PartitionLeases(ob, "two")
        tokens = []
        for leases in (one, one, two, one):
            lease = leases.claim()
            assert lease is not None
            tokens.append(lease.token)
            assert leases.release(lease) is True
            assert leases.release(lease) is False
        assert tokens == sorted(set(tokens))


def test_marks_under_a_lease_check_it_and_renew_it(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["p", "q"], 3)
        one, two = PartitionLeases(ob, "one", ttl=60), PartitionLeases(ob, "two", ttl=60)
        lease = one.claim()
        assert lease is not None and lease.partition == "p"
        other = two.claim()
        assert other is not None and other.partition == "q"
        target.execute("UPDATE ackledger_partition_leases SET expires_at = expires_at - 30")
        one.mark_sent(lease, ids["p"][0])
        (row,) = [r for r in one.leases() if r["partition"] == "p"]
        assert row["expires_at"] > lease.expires_at - 30 + 15  # renewed by the mark
        before = target.dump()
        with pytest.raises(KeyError):
            one.mark_sent(lease, ids["q"][0])  # not in the leased partition
        with pytest.raises(KeyError):
            one.mark_sent(lease, "no-such-event")
        assert target.dump() == before

        expire(target, "p")
        before = target.dump()
        with pytest.raises(LeaseLost):
            one.mark_sent(lease, ids["p"][1])  # expired, nobody else holds it yet
        assert target.dump() == before
        taken = two.claim()
        assert taken is not None and taken.partition == "p" and taken.token > lease.token
        with pytest.raises(LeaseLost):
            one.mark_sent_many(lease, ids["p"][1:])
        with pytest.raises(LeaseLost):
            one.renew(lease)
        assert one.release(lease) is False
        two.mark_sent_many(taken, ids["p"][1:])
    sent = target.rows("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq")
    assert [r[0] for r in sent] == ids["p"]


def test_pending_in_partition_is_in_seq_order_bounded_and_writes_nothing(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["p", "q"], 20)
        leases = PartitionLeases(ob, "one")
        before = target.dump()
        items = leases.pending_in_partition("q", 16)
        assert [item["id"] for item in items] == ids["q"][:16]
        assert [item["seq"] for item in items] == sorted(item["seq"] for item in items)
        assert leases.pending_in_partition("none-such") == []
        for bad in (0, 17, True, "2"):
            with pytest.raises(ValueError, match="limit"):
                leases.pending_in_partition("q", bad)  # type: ignore[arg-type]
        assert target.dump() == before


@pytest.mark.parametrize("mark_sync", ["each", "last"])
def test_dispatch_through_a_leased_partition_stops_when_the_lease_is_lost(
    target: Target, mark_sync: str
) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["p"], 4)
        one, two = PartitionLeases(ob, "one"), PartitionLeases(ob, "two")
        lease = one.claim()
        assert lease is not None
        sent: list[str] = []

        def send(event: dict[str, Any]) -> bool:
            sent.append(event["id"])
            if len(sent) == 2:  # paused here long enough to lose the lease
                expire(target, "p")
                taken = two.claim()
                assert taken is not None and taken.partition == "p"
            return True

        with pytest.raises(LeaseLost):
            dispatch(LeasedPartition(one, lease), send, mark_sync=mark_sync)
        assert sent == ids["p"][:2]
        # The first was marked under the lease; the second was refused: the new owner re-sends it.
        assert [item["id"] for item in ob.pending()] == ids["p"][1:]


def test_concurrent_claimers_never_share_a_partition(target: Target) -> None:
    keys = [f"k{n:02d}" for n in range(12)]
    with Outbox(target.ref) as ob:
        fill(ob, keys, 1)
    outboxes = [Outbox(target.ref) for _ in range(6)]
    barrier = threading.Barrier(len(outboxes))
    taken: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claim_all(n: int, ob: Outbox) -> None:
        leases = PartitionLeases(ob, f"w{n}")
        mine: list[str] = []
        try:
            barrier.wait(timeout=60)
            while (lease := leases.claim()) is not None:
                mine.append(lease.partition)
        except BaseException as exc:
            errors.append(exc)
        taken[f"w{n}"] = mine

    threads = [threading.Thread(target=claim_all, args=pair) for pair in enumerate(outboxes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for ob in outboxes:
        ob.close()
    assert errors == []
    claimed = [key for mine in taken.values() for key in mine]
    assert sorted(claimed) == keys  # every partition once, none twice


@pytest.mark.parametrize("mode", ["each", "last", "pipeline", "item-pipeline"])
def test_workers_send_each_partition_in_seq_order_and_everything_once(
    target: Target, mode: str
) -> None:
    """Per item (every mark durable, or the last of a round, or each one committed behind the
    next send: ``item-pipeline``), or in batches whose marks are committed behind the next
    send (``pipeline``); marks behind are still lease-checked."""
    keys = [f"p{n}" for n in range(6)]
    with Outbox(target.ref) as ob:
        ids = fill(ob, keys, 30)
    arrivals: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def send(event: dict[str, Any]) -> bool:
        with lock:
            arrivals.append(event["id"])
        return True

    def send_batch(events: list[dict[str, Any]]) -> int:
        return sum(send(event) for event in events)

    def work(owner: str) -> None:
        with Outbox(target.ref) as mine, Outbox(target.ref) as marker:
            how: dict[str, Any] = {
                "pipeline": {
                    "send_batch": send_batch,
                    "pipeline": True,
                    "marker": marker,
                    "limit": 4,
                },
                "item-pipeline": {"send": send, "pipeline": True, "marker": marker},
            }.get(mode, {"send": send, "mark_sync": mode})
            partition_worker(
                mine, owner=owner, stop=stop, poll_interval=0.05, log=lambda _: None, **how
            ).run()

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    with Outbox(target.ref) as ob:
        while ob.pending(1) and not stop.wait(0.05):
            pass
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(arrivals) == sorted(i for key in keys for i in ids[key])  # each once
    for key in keys:
        assert [i for i in arrivals if i.endswith(f"-{key}")] == ids[key]
    with Outbox(target.ref) as ob:
        leases = PartitionLeases(ob, "observer").leases()
    assert {row["partition"] for row in leases} == set(keys)
    assert not any(row["live"] for row in leases)  # a stopped worker lets its lease go


def test_a_failing_partition_is_parked_while_the_others_go_on(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, ["bad", "good-1", "good-2"], 20)
    stop = threading.Event()
    log: list[str] = []

    def send(event: dict[str, Any]) -> bool:
        if event["partitionkey"] == "bad":
            raise NotAcknowledged("HTTP 422 instead of 200")
        return True

    with Outbox(target.ref) as ob:
        worker = threading.Thread(
            target=partition_worker(
                ob, owner="w", send=send, stop=stop, poll_interval=0.05, log=log.append
            ).run
        )
        worker.start()
        while {item["partitionkey"] for item in ob.pending(16)} != {"bad"} and not stop.wait(0.05):
            pass
        stop.set()
        worker.join(timeout=120)
        left = [item["id"] for item in ob.pending(16)]
    assert left == ids["bad"][:16]
    # The single loop's send-failed text (the partition is a field of the logger's line).
    failed = [line for line in log if "retrying in" in line]
    assert failed
    assert all(line.startswith("w: NotAcknowledged: HTTP 422 instead of 200; ") for line in failed)
    assert (
        target.rows("SELECT attempts FROM ackledger_outbox WHERE id = ?", (ids["bad"][0],))[0][0]
        >= 1
    )
    assert target.rows("SELECT attempts FROM ackledger_outbox WHERE id = ?", (ids["bad"][1],)) == [
        (0,)
    ]


def _run_until_drained(ob: Outbox, worker: PartitionWorker) -> None:
    """Run the worker on a thread until nothing is pending, then stop it."""
    thread = threading.Thread(target=worker.run)
    thread.start()
    while ob.pending(1) and not worker.stop.wait(0.01):
        pass
    worker.stop.set()
    thread.join(timeout=60)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_worker_logs_and_backs_off_like_the_single_relay(target: Target) -> None:
    """Event names and fields on the relay's logger, waits drawn from the same capped
    schedule (base * 2**n), a seed that repeats them, and the relay's failure metrics."""
    base, cap = 0.01, 0.03

    waits: list[float] = []

    def run(seed: int) -> tuple[list[logging.LogRecord], Any]:
        waits.clear()
        with Outbox(target.ref) as ob:
            fill(ob, ["p"], 2)
        refusals = iter(range(4))
        stop = threading.Event()
        seen_failures: list[int] = []

        def send(event: dict[str, Any]) -> bool:
            if len(waits) < worker.counts.consecutive_failures:
                waits.append(worker.counts.backoff_s)  # the wait the last failure chose
            if next(refusals, None) is not None:
                raise NotAcknowledged("HTTP 503 instead of 200")
            seen_failures.append(worker.counts.consecutive_failures)
            return True

        handler = _Records()
        relay_logger.addHandler(handler)
        relay_logger.setLevel(logging.INFO)
        try:
            with Outbox(target.ref) as ob:
                worker = partition_worker(
                    ob, owner=f"w{seed}", send=send, stop=stop, poll_interval=0.01,
                    base_backoff=base, max_backoff=cap, seed=seed,
                )  # fmt: skip
                _run_until_drained(ob, worker)
        finally:
            relay_logger.removeHandler(handler)
        assert seen_failures and seen_failures[0] == 4  # the metric saw the failed rounds
        assert worker.counts.consecutive_failures == 0 and worker.counts.backoff_s == 0.0
        target.execute("DELETE FROM ackledger_outbox")
        return handler.records, list(waits)

    records, first_waits = run(seed=7)
    events = [getattr(record, "event", "") for record in records]
    assert events[0] == "started" and events[-1] == "stopped"
    assert events.count("send-failed") == 4
    assert "recovered" in events and "sent" in events
    assert events.index("recovered") > max(i for i, e in enumerate(events) if e == "send-failed")
    failed = [record.fields for record in records if record.event == "send-failed"]  # type: ignore[attr-defined]
    assert [fields["failures_in_a_row"] for fields in failed] == [1, 2, 3, 4]
    # The single loop's send-failed line: the wait is in its text ("retrying in 0.01s"); the
    # exact figure is the relay's backoff_s metric, read by the next send.
    assert len(first_waits) == 4
    texts = [record.getMessage() for record in records if record.event == "send-failed"]  # type: ignore[attr-defined]
    for n, (fields, wait, text) in enumerate(zip(failed, first_waits, texts, strict=True)):
        assert 0 <= wait <= min(cap, base * 2**n)
        assert text == f"NotAcknowledged: HTTP 503 instead of 200; retrying in {wait:.2f}s"
        assert fields["owner"] == "w7" and fields["partition"] == "p"
        assert fields["failure_class"] == "transient"
    _, again_waits = run(seed=7)
    assert again_waits == first_waits


def test_the_worker_counts_batch_attempts_as_the_single_loop_does(target: Target) -> None:
    """The acknowledged items plus one for the refused item or the failed request; the items
    behind a refusal were never looked at (found by review: raised batches went uncounted,
    refused ones counted every item)."""
    with Outbox(target.ref) as ob:
        fill(ob, ["p"], 4)
    answers: list[object] = [1, ConnectionRefusedError(111, "refused")]

    def send_batch(events: list[dict[str, Any]]) -> int:
        answer = answers.pop(0) if answers else len(events)
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, int)
        return answer

    with Outbox(target.ref) as ob:
        worker = partition_worker(
            ob, owner="w", send_batch=send_batch, stop=threading.Event(), poll_interval=0.01,
            base_backoff=0.01, max_backoff=0.02,
        )  # fmt: skip
        _run_until_drained(ob, worker)
    # 1 acked; 1 failed request; then the last 3 acked. The short answer came without the
    # sender's refusal (a real sender gives one), which the single loop counts as the store's.
    counts = worker.counts
    assert (counts.attempted, counts.succeeded, counts.store_errors) == (5, 4, 1)
    assert counts.failed == {"transient": 1, "permanent": 0}
