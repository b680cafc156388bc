"""The shortcuts taken for speed give exactly the answers of the long ways they replace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackledger import Conflict, InvalidEvent, Outbox, UnsafeTarget
from ackledger.event import (
    _validate_fully,
    canonical_json,
    event_fingerprint,
    event_json,
    fingerprint,
    validate_event,
)
from ackledger.sink.app import _ack_body, _batch_acks_body
from ackledger.sink.inbox import Inbox
from ackledger.store.outbox_sql import MARK_CHUNK
from ackledger.web.common import json_answer
from ackledger.wire.targets import check_target

from .conftest import raw_rows


def _pairs(rows: list[tuple[object, ...]]) -> dict[object, object]:
    return {row[0]: row[1] for row in rows}


IDENT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,130}", fullmatch=True)
ANY_TEXT = st.one_of(IDENT, st.text(max_size=10))
QTY = st.one_of(st.integers(-5, 1_000_005), st.booleans(), st.floats(allow_nan=False), st.text())


def _outcome(check: Any, obj: object) -> tuple[str, Any]:
    try:
        return "ok", check(obj)
    except InvalidEvent as exc:
        return "refused", (str(exc), exc.field)


@given(
    st.fixed_dictionaries(
        {"id": ANY_TEXT, "sku": ANY_TEXT, "qty": QTY},
        optional={"extra": st.integers()},
    )
)
def test_fast_validation_agrees_with_the_full_check(obj: dict[str, Any]) -> None:
    assert _outcome(validate_event, obj) == _outcome(_validate_fully, obj)


@given(st.fixed_dictionaries({"id": IDENT, "sku": IDENT, "qty": st.integers(1, 1_000_000)}))
def test_event_json_is_the_canonical_json(obj: dict[str, Any]) -> None:
    try:
        clean = validate_event(obj)
    except InvalidEvent:
        return
    assert event_json(clean) == canonical_json(clean)
    assert event_fingerprint(clean) == fingerprint(clean)


def test_a_str_subclass_cannot_steer_the_json() -> None:
    class Sneaky(str):
        def __format__(self, spec: str) -> str:
            return 'x","qty":5,"sku":"y'

    clean = validate_event({"id": Sneaky("abc"), "sku": "s", "qty": 1})
    assert type(clean["id"]) is str
    assert event_json(clean) == '{"id":"abc","qty":1,"sku":"s"}'


def _event(event_id: str, sku: str = "s", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


def test_receive_runs_keeps_each_run_to_itself(tmp_path: Path) -> None:
    db = tmp_path / "sink.db"
    with Inbox(db) as inbox:
        results = inbox.receive_runs(
            [
                [_event("a", qty=2), _event("b", qty=3)],
                [_event("a", qty=2), _event("a", qty=9), _event("c", qty=100)],
                [_event("d", qty=4), {"id": "e", "sku": "s"}, _event("f", qty=100)],
                [_event("g", "other", 5)],
            ]
        )
    assert [r.statuses for r in results] == [
        ["applied", "applied"],
        ["duplicate"],
        ["applied"],
        ["applied"],
    ]
    assert results[0].error is None
    assert isinstance(results[1].error, Conflict)
    assert isinstance(results[2].error, InvalidEvent)
    assert results[3].error is None
    assert _pairs(raw_rows(db, "SELECT sku, qty FROM inventory")) == {"s": 9, "other": 5}
    assert {r[0] for r in raw_rows(db, "SELECT id FROM inbox")} == {"a", "b", "d", "g"}
    counters = _pairs(raw_rows(db, "SELECT name, value FROM counters"))
    counters.pop("sink.arrival")  # the arrival sequence (numbers for every item offered)
    assert counters == {"sink.applied": 4, "sink.duplicate": 1, "sink.conflict": 1}


def test_receive_runs_with_nothing_valid_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "sink.db"
    with Inbox(db) as inbox:
        (result,) = inbox.receive_runs([[{"id": "x"}]])
    assert result.statuses == []
    assert isinstance(result.error, InvalidEvent)
    assert raw_rows(db, "SELECT count(*) FROM counters") == [(0,)]


def test_receive_and_batch_still_agree_with_the_contract(tmp_path: Path) -> None:
    with Inbox(tmp_path / "sink.db") as inbox:
        assert inbox.receive(_event("r1", qty=2)) == "applied"
        assert inbox.receive(_event("r1", qty=2)) == "duplicate"
        with pytest.raises(Conflict):
            inbox.receive(_event("r1", qty=3))
        assert inbox.stock("s") == 2
        batch = inbox.receive_batch([_event("r2"), _event("r1", qty=2), _event("r3", qty=4)])
        assert batch.statuses == ["applied", "duplicate", "applied"]
        assert inbox.stock("s") == 7


def test_mark_sent_many_in_one_statement(tmp_path: Path) -> None:
    db = tmp_path / "source.db"
    count = MARK_CHUNK + 40  # more than one chunk
    with Outbox(db) as outbox:
        with outbox.transaction() as tx:
            for number in range(count):
                tx.enqueue(_event(f"m{number}"))
        ids = [f"m{number}" for number in range(count)]
        outbox.mark_sent_many([*ids, ids[0]], attempted=True)
    rows = raw_rows(db, "SELECT sent, attempts FROM outbox")
    assert rows == [(1, 1)] * count


def test_mark_sent_many_with_an_unknown_id_marks_nothing(tmp_path: Path) -> None:
    db = tmp_path / "source.db"
    with Outbox(db) as outbox:
        outbox.accept(_event("known"))
        with pytest.raises(KeyError, match="ghost"):
            outbox.mark_sent_many(["known", "ghost"])
    assert raw_rows(db, "SELECT sent FROM outbox") == [(0,)]


def test_check_target_parses_once_and_still_refuses() -> None:
    url = "http://127.0.0.1:8080/events"
    assert check_target(url) is check_target(url)
    assert (
        check_target(
            "http://sink.internal.invalid:1/events", allowed_hosts=iter(["sink.internal.invalid"])
        ).port
        == 1
    )
    for _ in range(2):
        with pytest.raises(UnsafeTarget, match="not allowed"):
            check_target("http://sink.internal.invalid:1/events")
    with pytest.raises(UnsafeTarget, match="path"):
        check_target(url, "/events/batch")


STATUS = st.sampled_from(["applied", "duplicate"])


@given(IDENT, STATUS)
def test_the_sinks_ack_body_is_its_json(event_id: str, status: str) -> None:
    try:
        validate_event(_event(event_id[:128]))
    except InvalidEvent:
        return
    expected = json_answer({"ack": True, "id": event_id[:128], "status": status}).body
    assert _ack_body(event_id[:128], status) == expected


@given(st.lists(st.tuples(IDENT, STATUS), min_size=1, max_size=16))
def test_the_sinks_batch_acks_body_is_its_json(acks: list[tuple[str, str]]) -> None:
    items = [_event(event_id[:128]) for event_id, _ in acks]
    statuses = [status for _, status in acks]
    payload = {
        "acks": [
            {"id": item["id"], "ack": True, "status": status}
            for item, status in zip(items, statuses, strict=True)
        ]
    }
    assert _batch_acks_body(items, statuses) == json_answer(payload).body
