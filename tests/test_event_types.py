"""CONTRACT v2 section 1, event types: a registered type's schema checks its data."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import ackledger
from ackledger import EventTypes, InvalidEvent, warehouse
from ackledger.envelope import validate_cloudevent
from tests.envelopehelp import BASE, refused


def order_schema(data: Any) -> Any:
    if not isinstance(data, dict) or set(data) != {"total"}:
        raise InvalidEvent("must be exactly {total}")
    if not isinstance(data["total"], int) or isinstance(data["total"], bool):
        raise InvalidEvent("total: must be an integer", field="total")
    if data["total"] < 0:
        raise InvalidEvent("cannot be negative", field="total")
    return {"total": data["total"]}


@pytest.fixture
def types() -> EventTypes:
    registry = EventTypes()
    registry.register("com.example.order.placed", order_schema)
    return registry


def test_exported_from_the_package() -> None:
    assert ackledger.EventTypes is EventTypes


def test_a_registered_schema_checks_data(types: EventTypes) -> None:
    event = validate_cloudevent({**BASE, "data": {"total": 5}}, types=types)
    assert event["data"] == {"total": 5}


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"total": "5"}, "data.total", "data.total: must be an integer"),
        ({"total": -1}, "data.total", "data.total: cannot be negative"),
        ([5], "data", "data: must be exactly {total}"),
        ({}, "data", "data: must be exactly {total}"),
    ],
)
def test_schema_refusals_name_data_fields(
    types: EventTypes, data: object, field: str, message: str
) -> None:
    error = refused({**BASE, "data": data}, types)
    assert (error.field, str(error)) == (field, message)
    assert isinstance(error.__cause__, InvalidEvent)


def test_a_registered_type_needs_data(types: EventTypes) -> None:
    error = refused(BASE, types)
    assert error.field == "data"
    assert str(error).startswith("data: missing")


def test_an_unregistered_type_passes_as_it_is(types: EventTypes) -> None:
    event = {**BASE, "type": "com.example.unknown", "data": {"anything": [1, None]}}
    assert validate_cloudevent(event, types=types) == event
    assert validate_cloudevent({**BASE, "data": "free"}) == {**BASE, "data": "free"}


def test_the_schema_sees_a_copy_and_its_answer_is_copied_too() -> None:
    kept: list[Any] = []

    def meddling(data: Any) -> Any:
        data["seen"] = True
        kept.append(data)
        return data

    registry = EventTypes()
    registry.register("com.example.order.placed", meddling)
    given = {"n": 1}
    event = validate_cloudevent({**BASE, "data": given}, types=registry)
    assert given == {"n": 1}
    assert event["data"] == {"n": 1, "seen": True}
    kept[0]["later"] = "change"
    assert "later" not in event["data"]


def test_what_a_schema_returns_must_be_json() -> None:
    registry = EventTypes()
    registry.register("com.example.order.placed", lambda data: {"when": object()})
    assert refused({**BASE, "data": 1}, registry).field == "data.when"


def test_a_schema_bug_is_not_turned_into_a_refusal() -> None:
    def broken(data: Any) -> Any:
        raise KeyError("bug")

    registry = EventTypes()
    registry.register("com.example.order.placed", broken)
    with pytest.raises(KeyError):
        validate_cloudevent({**BASE, "data": 1}, types=registry)


def test_the_reference_type_is_always_registered() -> None:
    assert "warehouse.stock.added" in EventTypes()
    assert list(EventTypes()) == ["warehouse.stock.added"]


def test_registries_are_independent(types: EventTypes) -> None:
    assert "com.example.order.placed" in types
    assert "com.example.order.placed" not in EventTypes()
    assert sorted(types) == list(types) == ["com.example.order.placed", "warehouse.stock.added"]


def test_a_name_is_registered_once(types: EventTypes) -> None:
    with pytest.raises(ValueError, match="already registered"):
        types.register("com.example.order.placed", order_schema)
    with pytest.raises(ValueError, match="already registered"):
        types.register("warehouse.stock.added", order_schema)


@pytest.mark.parametrize("name", ["", "tab\there", "x" * 257, 5])
def test_register_refuses_a_bad_name(name: Any) -> None:
    with pytest.raises(ValueError, match="name"):
        EventTypes().register(name, order_schema)


def test_register_refuses_a_non_callable() -> None:
    with pytest.raises(TypeError):
        EventTypes().register("com.example.x", "not callable")  # type: ignore[arg-type]


def test_check_runs_the_schema_or_passes_data_through(types: EventTypes) -> None:
    assert types.check("com.example.order.placed", {"total": 1}) == {"total": 1}
    data = {"free": 1}
    assert types.check("com.example.unknown", data) is data


def test_the_examples_of_docs_events_md_run() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "events.md"
    scope: dict[str, Any] = {"__name__": "events_doc"}
    for code in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
        exec(compile(code, str(doc), "exec"), scope)  # noqa: S102
    assert validate_cloudevent(scope["placed"], types=scope["types"])["data"] == {"total": 5}
    with pytest.raises(InvalidEvent, match=r"^data\.total: "):
        validate_cloudevent({**scope["placed"], "data": {"total": -1}}, types=scope["types"])


def test_a_schema_that_keeps_its_answer_does_not_share_it_with_the_event() -> None:
    # What a schema returns is copied, so a schema holding on to it cannot change a
    # validated event later.
    kept: dict[str, Any] = {"total": 1}
    registry = EventTypes()
    registry.register("com.example.order.kept", lambda data: kept)
    event = validate_cloudevent(
        {**BASE, "type": "com.example.order.kept", "data": {}}, types=registry
    )
    kept["total"] = 99
    assert event["data"] == {"total": 1}
    assert registry.schema("warehouse.stock.added") is warehouse.check_data
    assert registry.schema("com.example.unknown") is None
