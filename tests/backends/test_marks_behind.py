"""``dispatch_batch(..., behind=MarksBehind(...))``: a batch's marks land while the next is sent;
``dispatch(..., behind=...)``: one event's mark lands while the next event is sent.

Every rule of CONTRACT sections 4 and 5b must hold across the overlap: seq order, each event
sent once while nothing fails, the acknowledged prefix marked before a failure is reported,
nothing marked that was not acknowledged, and a mark that fails leaves its events pending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from ackledger import NotAcknowledged, Outbox, dispatch, dispatch_batch
from ackledger.source.marking import MarksBehind

from .conftest import Target


def fill(ob: Outbox, n: int) -> list[str]:
    ids = [f"mb-{k:03d}" for k in range(n)]
    for k, event_id in enumerate(ids):
        ob.accept({"id": event_id, "sku": f"s{k % 3}", "qty": k + 1})
    return ids


def sent_ids(target: Target) -> list[str]:
    return [
        row[0] for row in target.rows("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq")
    ]


def acknowledging() -> tuple[list[str], Callable[[list[dict[str, Any]]], int]]:
    """A send_batch that acknowledges every event, and the ids it was given, in order."""
    sent: list[str] = []

    def send_batch(events: list[dict[str, Any]]) -> int:
        sent.extend(e["id"] for e in events)
        return len(events)

    return sent, send_batch


@pytest.fixture
def behind(pair: tuple[Outbox, Outbox]) -> Iterator[MarksBehind]:
    """Marks behind, reading from ``behind.reader``; closed (its last marks waited for) at the
    end of the test if the test did not close it."""
    marks = MarksBehind(*pair)
    yield marks
    marks.close()


def test_every_event_is_sent_once_in_order_and_marked_by_close(
    target: Target, behind: MarksBehind
) -> None:
    reader = behind.reader
    ids = fill(reader, 37)
    sent: list[str] = []
    seen_inflight: list[int] = []

    def send_batch(events: list[dict[str, Any]]) -> int:
        # While this batch travels, the one before it may still be being marked: it must
        # never be selected again.
        seen_inflight.append(len(behind.inflight))
        sent.extend(e["id"] for e in events)
        return len(events)

    rounds = []
    while marked := dispatch_batch(reader, send_batch, 4, behind=behind):
        rounds.append(marked)
    behind.close()
    assert sent == ids  # seq order, nothing twice
    assert [i for r in rounds for i in r] == ids
    assert sent_ids(target) == ids
    assert max(seen_inflight) == 4  # the overlap did happen
    counts = target.rows("SELECT attempts FROM ackledger_outbox ORDER BY seq")
    assert [row[0] for row in counts] == [1] * len(ids)


def test_a_failed_send_reports_after_the_earlier_marks_landed(
    target: Target, behind: MarksBehind
) -> None:
    reader = behind.reader
    ids = fill(reader, 8)
    boom = ConnectionError("second batch lost")
    calls = 0

    def send_batch(events: list[dict[str, Any]]) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise boom
        return len(events)

    assert dispatch_batch(reader, send_batch, 4, behind=behind) == ids[:4]
    with pytest.raises(ConnectionError) as info:
        dispatch_batch(reader, send_batch, 4, behind=behind)
    assert info.value is boom
    # Read at once from another connection: the first batch is marked, nothing else.
    assert sent_ids(target) == ids[:4]
    assert behind.inflight == frozenset()
    row = reader.event(ids[4])
    assert row is not None and row["attempts"] == 1 and "second batch lost" in row["last_error"]


def test_a_partial_ack_marks_the_earlier_batch_and_the_prefix(
    target: Target, behind: MarksBehind
) -> None:
    reader = behind.reader
    ids = fill(reader, 8)
    answers = iter([4, 2])
    assert dispatch_batch(reader, lambda e: next(answers), 4, behind=behind) == ids[:4]
    with pytest.raises(NotAcknowledged):
        dispatch_batch(reader, lambda e: next(answers), 4, behind=behind)
    assert sent_ids(target) == ids[:6]
    assert [item["id"] for item in reader.pending()] == ids[6:]


def test_a_mark_that_fails_surfaces_and_leaves_its_events_pending(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    reader, marker = pair
    ids = fill(reader, 8)
    behind = MarksBehind(reader, marker)
    marker.close()  # every mark on it now fails
    sent, send_batch = acknowledging()

    assert dispatch_batch(reader, send_batch, 4, behind=behind) == ids[:4]
    with pytest.raises(Exception) as info:  # whatever the closed store raises
        dispatch_batch(reader, send_batch, 4, behind=behind)
    assert not isinstance(info.value, NotAcknowledged)
    assert sent == ids  # the second batch went before the first one's mark was known
    assert sent_ids(target) == []
    # Nothing was lost: the next selection starts from the first event again.
    assert [item["id"] for item in reader.pending(16)] == ids
    behind.close()


def test_close_waits_for_the_last_marks(target: Target, behind: MarksBehind) -> None:
    reader = behind.reader
    ids = fill(reader, 3)
    assert dispatch_batch(reader, len, 16, behind=behind) == ids
    behind.close()
    assert sent_ids(target) == ids
    behind.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        behind.submit(["x"])


def test_behind_must_read_from_the_outbox_it_is_given_with(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    reader, marker = pair
    fill(reader, 2)
    with pytest.raises(ValueError, match="marker"):
        MarksBehind(reader, reader)
    behind = MarksBehind(reader, marker)
    sent, send_batch = acknowledging()

    with pytest.raises(ValueError, match="behind"):
        dispatch_batch(marker, send_batch, 16, behind=behind)
    assert sent == [] and sent_ids(target) == []
    behind.close()


def test_pending_beyond_skips_only_the_given_ids_and_checks_its_limit(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 20)
        skip = frozenset([*ids[:3], ids[5]])
        got = [item["id"] for item in ob.pending_beyond(skip, 4)]
        assert got == [ids[3], ids[4], ids[6], ids[7]]
        # Skipping ids that are not pending changes nothing.
        assert [item["id"] for item in ob.pending_beyond({"nope"}, 16)] == ids[:16]
        before = target.dump()
        for bad in (0, 17, "4", None):
            with pytest.raises(ValueError, match="limit"):
                ob.pending_beyond(skip, bad)  # type: ignore[arg-type]
        assert target.dump() == before


# Per item: ``dispatch(..., behind=...)``.


def test_per_item_every_event_is_sent_once_in_order_each_mark_behind_the_next_send(
    target: Target, behind: MarksBehind
) -> None:
    reader = behind.reader
    ids = fill(reader, 23)
    sent: list[str] = []
    overlapped = 0

    def send(event: dict[str, Any]) -> bool:
        nonlocal overlapped
        # While this event travels, the previous one's mark (and only it) may be in flight.
        assert len(behind.inflight) <= 1 and event["id"] not in behind.inflight
        overlapped += behind.inflight == {sent[-1]} if sent else 0
        sent.append(event["id"])
        return True

    rounds = []
    while marked := dispatch(reader, send, 4, behind=behind):
        rounds.append(marked)
    # Nothing more to send: the call that found nothing let the last mark land.
    assert behind.inflight == frozenset() and sent_ids(target) == ids
    behind.close()
    assert sent == ids  # seq order, nothing twice
    assert [i for r in rounds for i in r] == ids
    assert sent_ids(target) == ids
    assert overlapped == len(ids) - 1  # every send but the first overlapped a mark
    counts = target.rows("SELECT attempts FROM ackledger_outbox ORDER BY seq")
    assert [row[0] for row in counts] == [1] * len(ids)


def holding_the_marks(target: Target) -> AbstractContextManager[None]:
    """While inside: no mark can commit (another connection holds the write lock on SQLite,
    the rows' locks on PostgreSQL); reads go on."""
    return target.holding_writes("SELECT 1 FROM ackledger_outbox FOR UPDATE")


def test_per_item_the_next_selection_skips_the_mark_in_flight(
    target: Target, behind: MarksBehind
) -> None:
    reader = behind.reader
    ids = fill(reader, 3)
    sent: list[str] = []
    held = holding_the_marks(target)

    def send(event: dict[str, Any]) -> bool:
        if not sent:
            held.__enter__()  # the first event's mark cannot land before the next selection
        elif len(sent) == 1:
            held.__exit__(None, None, None)
        sent.append(event["id"])
        return True

    assert dispatch(reader, send, 1, behind=behind) == ids[:1]
    assert behind.inflight == {ids[0]}
    assert [item["id"] for item in reader.pending()] == ids  # its mark is not committed yet
    assert dispatch(reader, send, 16, behind=behind) == ids[1:]
    behind.close()
    assert sent == ids
    assert sent_ids(target) == ids


@pytest.mark.parametrize("how", ["raises", "refuses"])
def test_per_item_a_failure_mid_selection_marks_exactly_the_acknowledged_prefix(
    target: Target, behind: MarksBehind, how: str
) -> None:
    reader = behind.reader
    ids = fill(reader, 8)
    boom = ConnectionError("fifth event lost")
    sent: list[str] = []

    def send(event: dict[str, Any]) -> object:
        sent.append(event["id"])
        if len(sent) < 5:
            return True
        if how == "raises":
            raise boom
        return "ok"  # anything but True is not an ACK

    with pytest.raises(Exception) as info:
        dispatch(reader, send, 16, behind=behind)
    if how == "raises":
        assert info.value is boom
    else:
        assert isinstance(info.value, NotAcknowledged)
    # The fourth event's mark landed before the failure was reported: read at once, from
    # another connection, exactly the acknowledged prefix is marked.
    assert behind.inflight == frozenset()
    assert sent_ids(target) == ids[:4]
    assert sent == ids[:5]
    row = reader.event(ids[4])
    assert row is not None and row["attempts"] == 1 and row["last_error"]
    assert [item["id"] for item in reader.pending(16)] == ids[4:]


def test_per_item_a_mark_that_fails_surfaces_at_the_next_hand_over(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    reader, marker = pair
    ids = fill(reader, 4)
    behind = MarksBehind(reader, marker)
    marker.close()  # every mark on it now fails
    sent: list[str] = []

    def send(event: dict[str, Any]) -> bool:
        sent.append(event["id"])
        return True

    with pytest.raises(Exception) as info:  # whatever the closed store raises
        dispatch(reader, send, 16, behind=behind)
    assert not isinstance(info.value, NotAcknowledged)
    assert sent == ids[:2]  # the second went before the first one's mark was known
    assert sent_ids(target) == []
    assert [item["id"] for item in reader.pending(16)] == ids
    # One event, nothing after it: the failed mark surfaces when it is settled (or closed).
    assert dispatch(reader, send, 1, behind=behind) == ids[:1]
    with pytest.raises(Exception) as again:
        behind.settle()
    assert type(again.value) is type(info.value)
    behind.close()


def test_per_item_behind_refuses_mark_sync_last_and_another_reader(
    target: Target, pair: tuple[Outbox, Outbox]
) -> None:
    reader, marker = pair
    fill(reader, 2)
    behind = MarksBehind(reader, marker)
    sent: list[str] = []

    def send(event: dict[str, Any]) -> bool:
        sent.append(event["id"])
        return True

    with pytest.raises(ValueError, match="mark_sync"):
        dispatch(reader, send, 16, mark_sync="last", behind=behind)
    with pytest.raises(ValueError, match="behind"):
        dispatch(marker, send, 16, behind=behind)
    with pytest.raises(ValueError, match="mark_sync"):
        dispatch(reader, send, 16, mark_sync="sometimes", behind=behind)
    assert sent == [] and sent_ids(target) == []
    behind.close()
