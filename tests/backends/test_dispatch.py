"""CONTRACT sections 4 and 5b (dispatch, dispatch_batch) on every backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ackledger import NotAcknowledged, Outbox, dispatch, dispatch_batch

from ..events import lab
from .conftest import Target


def fill(ob: Outbox, n: int) -> list[str]:
    ids = [f"ev-{chr(ord('z') - k)}" for k in range(n)]  # ids sort against seq order
    for k, event_id in enumerate(ids):
        ob.accept({"id": event_id, "sku": f"s{k % 3}", "qty": k + 1})
    return ids


def sent_ids(target: Target) -> list[str]:
    return [
        row[0] for row in target.rows("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq")
    ]


def test_sends_copies_in_seq_order_and_marks_what_was_acknowledged(target: Target) -> None:
    seen: list[dict[str, Any]] = []
    with Outbox(target.ref) as ob:
        ids = fill(ob, 4)

        def send(event: dict[str, Any]) -> bool:
            seen.append(dict(event))
            return True

        assert dispatch(ob, send) == ids
        assert ob.pending() == []
        assert dispatch(ob, send) == []
    assert [e["id"] for e in seen] == ids
    # The event itself, no seq.
    assert seen[0] == lab(ids[0], "s0", 1, source=ob.source)
    assert seen == [lab(ids[k], f"s{k % 3}", k + 1, source=ob.source) for k in range(4)]
    assert sent_ids(target) == ids


def test_first_exception_stops_the_batch_and_is_reraised_as_the_same_object(
    target: Target,
) -> None:
    boom = ConnectionResetError("sink went away")
    calls: list[str] = []
    with Outbox(target.ref) as ob:
        ids = fill(ob, 4)

        def send(event: dict[str, Any]) -> bool:
            calls.append(event["id"])
            if len(calls) == 2:
                raise boom
            return True

        with pytest.raises(ConnectionResetError) as raised:
            dispatch(ob, send)
        assert raised.value is boom
        assert [item["id"] for item in ob.pending()] == ids[1:]
        assert calls == ids[:2]
        assert sent_ids(target) == ids[:1]
        assert target.rows("SELECT attempts FROM ackledger_outbox WHERE id = ?", (ids[1],)) == [
            (1,)
        ]
        row = ob.event(ids[1])
        assert row is not None and row["attempts"] == 1 and "sink went away" in row["last_error"]
        calls.clear()

        def record(event: dict[str, Any]) -> bool:
            calls.append(event["id"])
            return True

        # The next call starts again at the event that failed.
        assert dispatch(ob, record) == ids[1:]
    assert calls == ids[1:]
    assert sent_ids(target) == ids


@pytest.mark.parametrize("answer", [1, "ok", None, False, {"ack": True}, "True", "ack", [True]])
def test_anything_but_true_is_not_an_ack_and_stops(target: Target, answer: object) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 3)
        with pytest.raises(NotAcknowledged):
            dispatch(ob, lambda event: answer)
        assert [item["id"] for item in ob.pending()] == ids
        assert sent_ids(target) == []
        # After one true ACK: the first event is marked, the refusal names the second.
        with pytest.raises(NotAcknowledged, match=repr(ids[1])):
            dispatch(ob, lambda event: True if event["id"] == ids[0] else answer)
        assert [item["id"] for item in ob.pending()] == ids[1:]
    assert sent_ids(target) == ids[:1]


def test_a_callback_editing_its_copy_cannot_mark_another_event(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 3)

        def send(event: dict[str, Any]) -> bool:
            event["id"] = ids[2]  # points at another pending event
            event["data"]["qty"] = 999
            return True

        with pytest.raises(ValueError, match="limit"):
            dispatch(ob, send, limit=17)
        assert dispatch(ob, send, limit=1) == [ids[0]]
        assert [item["id"] for item in ob.pending()] == ids[1:]
        assert sent_ids(target) == [ids[0]]

        def send_pointing_ahead(event: dict[str, Any]) -> bool:
            if event["id"] == ids[1]:
                event["id"] = ids[2]  # acknowledged: marks ids[1], not the id it now holds
                return True
            raise RuntimeError("the last one must stay pending")

        with pytest.raises(RuntimeError, match="must stay pending"):
            dispatch(ob, send_pointing_ahead)
    assert sent_ids(target) == ids[:2]
    assert target.rows("SELECT data FROM ackledger_outbox WHERE id = ?", (ids[0],)) == [
        ('{"qty":1,"sku":"s0"}',)
    ]
    assert target.rows("SELECT data FROM ackledger_outbox WHERE id = ?", (ids[1],)) == [
        ('{"qty":2,"sku":"s1"}',)
    ]


def test_no_lock_is_held_while_send_runs(target: Target) -> None:
    free: list[bool] = []
    accepted: list[int] = []
    with Outbox(target.ref) as ob, Outbox(target.ref) as other:
        ids = fill(ob, 3)

        def send(event: dict[str, Any]) -> bool:
            free.append(target.can_lock_exclusively())
            other.accept({"id": f"during-{event['id']}", "sku": "x", "qty": 1})
            with Outbox(target.ref) as opened_now:  # opening checks the schema: no wait either
                accepted.append(
                    opened_now.accept({"id": f"new-{event['id']}", "sku": "s", "qty": 1})
                )
            return True

        assert dispatch(ob, send, limit=3) == ids
        assert [item["id"] for item in ob.pending()] == [
            f"{prefix}-{event_id}" for event_id in ids for prefix in ("during", "new")
        ]
    assert free == [True, True, True]
    assert len(accepted) == 3


def test_after_delivery_sees_the_selected_id_before_it_is_marked(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 3)
        states: list[tuple[str, list[str], list[str]]] = []

        def after(event_id: str) -> None:
            states.append((event_id, [item["id"] for item in ob.pending()], sent_ids(target)))
            if event_id == ids[1]:
                raise KeyboardInterrupt  # like a process dying: this one must not be marked

        with pytest.raises(KeyboardInterrupt):
            dispatch(ob, lambda event: True, after_delivery=after)
    assert states == [(ids[0], ids, []), (ids[1], ids[1:], ids[:1])]
    assert sent_ids(target) == ids[:1]


def test_dispatch_batch_marks_the_acknowledged_prefix(target: Target) -> None:
    batches: list[list[str]] = []
    delivered: list[list[str]] = []
    with Outbox(target.ref) as ob:
        ids = fill(ob, 5)

        def send_batch(events: list[dict[str, Any]]) -> int:
            batches.append([e["id"] for e in events])
            return 2

        with pytest.raises(NotAcknowledged, match=f"only 2 of 5 .*{ids[2]!r}"):
            dispatch_batch(ob, send_batch, after_delivery=delivered.append)
        assert batches == [ids]
        assert [item["id"] for item in ob.pending()] == ids[2:]
        assert dispatch_batch(ob, len, after_delivery=delivered.append) == ids[2:]
    assert sent_ids(target) == ids
    assert delivered == [ids[:2], ids[2:]]  # after_delivery sees the acknowledged ids


def answering(answer: object) -> Callable[[list[dict[str, Any]]], object]:
    return lambda events: answer


def test_dispatch_batch_reraises_the_senders_exception_and_marks_nothing(target: Target) -> None:
    boom = TimeoutError("slow sink")
    with Outbox(target.ref) as ob:
        ids = fill(ob, 3)

        def send_batch(events: list[dict[str, Any]]) -> int:
            raise boom

        with pytest.raises(TimeoutError) as raised:
            dispatch_batch(ob, send_batch)
        assert raised.value is boom
        for bad in (True, -1, 4, "3", None, 2.0):
            with pytest.raises(NotAcknowledged):
                dispatch_batch(ob, answering(bad))
        assert [item["id"] for item in ob.pending()] == ids
    assert sent_ids(target) == []


def test_a_callback_mutating_nested_data_changes_nothing_stored_or_selected(
    target: Target,
) -> None:
    nested = {"lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "meta": {"n": 1}}
    with Outbox(target.ref) as ob:
        for name in ("n-1", "n-2"):
            ob.publish({"type": "com.example.order.placed", "id": name, "data": nested})
        stored = target.rows("SELECT id, data, event FROM ackledger_outbox ORDER BY seq")
        before = ob.pending()
        arrived: list[Any] = []

        def send(event: dict[str, Any]) -> bool:
            arrived.append(json.loads(json.dumps(event)))  # as it came, before the edits
            assert type(event) is dict and "seq" not in event
            event["data"]["lines"][0]["qty"] = 999
            event["data"]["lines"].append({"sku": "ghost"})
            event["data"]["meta"]["n"] = 2
            event["type"] = "com.example.changed"
            if event["id"] == "n-2":
                raise RuntimeError("the second stays pending")
            return True

        with pytest.raises(RuntimeError, match="stays pending"):
            dispatch(ob, send)
        # Each copy arrived as stored: the first one's edits did not reach the second.
        assert [item["data"] for item in arrived] == [nested, nested]
        assert [item["type"] for item in arrived] == ["com.example.order.placed"] * 2
        after = ob.pending()
        assert after == [before[1]]
        assert after[0]["data"] == nested
        assert after[0]["type"] == "com.example.order.placed"
    assert target.rows("SELECT id, data, event FROM ackledger_outbox ORDER BY seq") == stored
    assert nested == {"lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "meta": {"n": 1}}


def test_dispatch_batch_hands_a_function_dicts_it_may_edit_and_nothing_reaches_the_rows(
    target: Target,
) -> None:
    nested = {"lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "meta": {"n": 1}}
    with Outbox(target.ref) as ob:
        for name in ("b-1", "b-2", "b-3"):
            ob.publish({"type": "com.example.order.placed", "id": name, "data": nested})
        stored = target.rows("SELECT id, data, event FROM ackledger_outbox ORDER BY seq")
        before = ob.pending()
        arrived: list[Any] = []

        def send_batch(events: list[dict[str, Any]]) -> int:
            arrived.append(json.loads(json.dumps(events)))  # as they came, before the edits
            for event in events:
                assert type(event) is dict and "seq" not in event
                event["data"]["lines"][0]["qty"] = 999
                event["data"]["lines"].append({"sku": "ghost"})
                event["data"]["meta"]["n"] = 2
                event["id"] = "b-3"  # points at another pending event: marks nothing of it
            return 1

        with pytest.raises(NotAcknowledged, match="only 1 of 3"):
            dispatch_batch(ob, send_batch)
        # Each copy arrived as published, without seq: no edit reached another copy.
        assert [[item["data"] for item in batch] for batch in arrived] == [[nested] * 3]
        assert [item["id"] for item in arrived[0]] == ["b-1", "b-2", "b-3"]
        assert sent_ids(target) == ["b-1"]
        after = ob.pending()
        assert after == before[1:]
        assert [item["data"] for item in after] == [nested, nested]
        # The next selection's copies are fresh too.
        with pytest.raises(NotAcknowledged, match="only 1 of 2"):
            dispatch_batch(ob, send_batch)
        assert [item["data"] for item in arrived[1]] == [nested, nested]
    assert target.rows("SELECT id, data, event FROM ackledger_outbox ORDER BY seq") == stored
    assert sent_ids(target) == ["b-1", "b-2"]
