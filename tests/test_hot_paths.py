"""The shortcuts taken for speed give exactly the answers of the long ways they replace."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackledger import InvalidEvent, UnsafeTarget, warehouse
from ackledger._core.canonical import canonical_json, fingerprint
from ackledger.envelope import validate_cloudevent
from ackledger.sink.app import _Ack, _ack_body, _batch_acks_body
from ackledger.warehouse.v1 import (
    _validate_fully,
    event_fingerprint,
    event_json,
    validate_event,
)
from ackledger.web.answers import Answer, json_answer
from ackledger.wire.targets import check_target

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


def _event(event_id: str, source: str = "/s") -> dict[str, Any]:
    return warehouse.event(event_id, "s", 1, source=source)


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
#: Sources: URI-shaped ones, and any printable ASCII (quotes and backslashes included), so a
#: validator that let through a character JSON escapes would break the sink's shortcut.
SOURCES = st.one_of(
    st.from_regex(
        r"[A-Za-z][A-Za-z0-9+.-]{0,8}:[A-Za-z0-9._~!$&'()*+,;=:@%/?#-]{0,60}", fullmatch=True
    ),
    st.from_regex(r"/[A-Za-z0-9._~!$&'()*+,;=:@/-]{0,60}", fullmatch=True),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1),
)


def _valid(event_id: str, source: str) -> dict[str, Any] | None:
    try:
        return validate_cloudevent(_event(event_id[:128], source))
    except InvalidEvent:
        return None


@given(IDENT, SOURCES, STATUS)
def test_the_sinks_ack_body_is_its_json(event_id: str, source: str, status: str) -> None:
    clean = _valid(event_id, source)
    if clean is None:
        return
    ack = {"ack": True, "id": clean["id"], "source": clean["source"], "status": status}
    assert _ack_body(clean, status) == json_answer(ack).body


@given(st.lists(st.tuples(IDENT, SOURCES, STATUS), min_size=1, max_size=16))
def test_the_sinks_batch_acks_body_is_its_json(acks: list[tuple[str, str, str]]) -> None:
    valid = [(_valid(event_id, source), status) for event_id, source, status in acks]
    items = [item for item, _ in valid if item is not None]
    statuses = [status for item, status in valid if item is not None]
    if not items:
        return
    payload = {
        "acks": [
            {"id": item["id"], "source": item["source"], "ack": True, "status": status}
            for item, status in zip(items, statuses, strict=True)
        ]
    }
    assert _batch_acks_body(items, statuses) == json_answer(payload).body


@pytest.mark.parametrize("replayed", [False, True])
def test_the_sinks_ack_is_the_answer_it_stands_for(replayed: bool) -> None:
    """``_Ack`` writes its fields itself (not through the frozen dataclass's ``__init__``):
    the same fields and headers as the ``Answer`` it replaces, and still frozen."""
    body = b'{"ack":true,"id":"a-1","source":"urn:x","status":"duplicate"}'
    ack = _Ack(body, replayed)
    answer = Answer(200, body, "application/json", _REPLAYED if replayed else None)
    assert isinstance(ack, Answer)
    fields = [field.name for field in dataclasses.fields(Answer)]
    assert [getattr(ack, name) for name in fields] == [getattr(answer, name) for name in fields]
    assert ack.header_pairs() == answer.header_pairs()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.status = 500  # type: ignore[misc]


_REPLAYED = {"Idempotent-Replayed": "true"}
