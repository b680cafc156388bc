"""The lone event's lean checks keep the rules they replaced: the fast
path counts its attribute names off instead of a set test, quotes plain subjects and keys
itself, the lab's schema remembers the skus it checked, and ``EventTypes.schema`` is the
registry's own ``get``."""

from __future__ import annotations

from typing import Any

import pytest

from ackledger import EventTypes, InvalidEvent, warehouse
from ackledger.envelope import canonical_json, fingerprint_of, validate_encoded
from ackledger.envelope.content import content_fingerprint
from ackledger.envelope.fast import fast_encoded


def lab(**extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": "e-1",
        "source": "urn:lean:test",
        "type": warehouse.TYPE,
        "data": {"sku": "sku-1", "qty": 3},
        "subject": "sku-1",
        "partitionkey": "sku-1",
    }
    event.update(extra)
    return event


@pytest.mark.parametrize(
    "extra",
    [
        {"time": "2026-12-05T04:00:00Z"},
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {"region": "eu"},
        {"data_base64": "AAAA"},
    ],
)
def test_an_attribute_the_fast_path_does_not_know_goes_the_full_way(
    extra: dict[str, Any],
) -> None:
    obj = lab(**extra)
    assert fast_encoded(obj, EventTypes()) is None
    if "data_base64" in extra:
        with pytest.raises(InvalidEvent) as refused:
            validate_encoded(obj)
        assert refused.value.field == "data_base64"
    else:
        event, text = validate_encoded(obj)
        assert event == obj
        assert text == canonical_json(obj)


def test_a_users_schema_runs_once_for_an_event_the_fast_path_hands_on() -> None:
    calls: list[object] = []

    def schema(data: Any) -> Any:
        calls.append(data)
        return data

    types = EventTypes()
    types.register("com.example.kept", schema)
    obj = lab(type="com.example.kept", data={"n": 1}, time="2026-12-05T04:00:00Z")
    event, _ = validate_encoded(obj, types=types)
    assert event["time"] == "2026-12-05T04:00:00Z"
    # Settled before the schema: an event with time is not checked on the fast path first.
    assert calls == [{"n": 1}]


@pytest.mark.parametrize("name", ["subject", "partitionkey"])
@pytest.mark.parametrize("value", ['a"b', "a\\b", '"', "\\", "a\\u0041", "é", "a b"])
def test_a_subject_or_key_that_json_escapes_is_written_as_the_encoder_writes_it(
    name: str, value: str
) -> None:
    obj = lab(**{name: value})
    event, text = validate_encoded(obj)
    assert event[name] == value
    assert text == canonical_json(event)
    assert fingerprint_of(event, text) == content_fingerprint(event)


def test_a_checked_sku_is_remembered_but_a_refused_one_never_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(warehouse.schema, "_SKUS", set())  # its memory, fresh for this test
    for _ in range(2):
        with pytest.raises(InvalidEvent) as refused:
            warehouse.check_data({"sku": "-not an identifier", "qty": 1})
        assert refused.value.field == "sku"
        with pytest.raises(InvalidEvent):
            warehouse.check_data({"sku": "s" * 65, "qty": 1})
        # A remembered sku still has its quantity checked.
        assert warehouse.check_data({"sku": "sku-lean", "qty": 2}) == {"sku": "sku-lean", "qty": 2}
        with pytest.raises(InvalidEvent) as refused:
            warehouse.check_data({"sku": "sku-lean", "qty": 0})
        assert refused.value.field == "qty"
    assert "-not an identifier" not in warehouse.schema._SKUS
    assert "sku-lean" in warehouse.schema._SKUS


def test_the_remembered_skus_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warehouse.schema, "_SKUS", set())
    for number in range(2 * warehouse.schema._MAX_KNOWN):
        assert warehouse.check_data({"sku": f"bounded-{number}", "qty": 1})["qty"] == 1
    assert len(warehouse.schema._SKUS) <= warehouse.schema._MAX_KNOWN


def test_a_schema_registered_after_the_first_event_is_the_one_used() -> None:
    types = EventTypes()
    assert validate_encoded(lab(type="com.example.late", data={"n": 1}), types=types)
    assert types.schema("com.example.late") is None

    def refuse(data: Any) -> Any:
        raise InvalidEvent("n: refused", field="n")

    types.register("com.example.late", refuse)
    assert types.schema("com.example.late") is refuse
    with pytest.raises(InvalidEvent) as refused:
        validate_encoded(lab(id="e-2", type="com.example.late", data={"n": 1}), types=types)
    assert refused.value.field == "data.n"
