"""CONTRACT v2 section 1, the reference type ``warehouse.stock.added`` (the seeds' lab)."""

from __future__ import annotations

from typing import Any

import pytest

import ackledger
from ackledger import InvalidEvent, warehouse
from ackledger.envelope import content_fingerprint, identity, validate_cloudevent
from ackledger.event import validate_event as v1_validate


def stock(data: object) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": "order-1",
        "source": "/warehouse",
        "type": "warehouse.stock.added",
        "data": data,
    }


def test_importable_from_the_package() -> None:
    import ackledger.warehouse as module

    assert ackledger.warehouse is module is warehouse
    assert warehouse.TYPE == "warehouse.stock.added"


def test_event_builds_a_valid_event_with_the_sku_as_subject_and_partition() -> None:
    event = warehouse.event("order-1", "snack-7", 7, source="/warehouse")
    assert event == {
        "specversion": "1.0",
        "id": "order-1",
        "source": "/warehouse",
        "type": "warehouse.stock.added",
        "subject": "snack-7",
        "partitionkey": "snack-7",
        "data": {"sku": "snack-7", "qty": 7},
    }
    assert validate_cloudevent(event) == event
    assert identity(event) == ("/warehouse", "order-1")


def test_event_has_a_default_source() -> None:
    assert warehouse.event("o", "s", 1)["source"] == warehouse.SOURCE


def test_the_same_order_makes_the_same_event() -> None:
    one = warehouse.event("order-1", "snack-7", 7)
    assert content_fingerprint(warehouse.event("order-1", "snack-7", 7)) == content_fingerprint(one)
    assert content_fingerprint(warehouse.event("order-1", "snack-7", 8)) != content_fingerprint(one)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "snack", 1), "id"),
        (("-x", "snack", 1), "id"),
        (("o", "", 1), "data.sku"),
        (("o", "s" * 65, 1), "data.sku"),
        (("o", "has space", 1), "data.sku"),
        (("o", 7, 1), "data.sku"),
        (("o", "snack", 0), "data.qty"),
        (("o", "snack", True), "data.qty"),
        (("o", "snack", 1.0), "data.qty"),
        (("o", "snack", 1_000_001), "data.qty"),
    ],
)
def test_event_refuses_what_v1_refuses(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        warehouse.event(*args)
    assert info.value.field == field


@pytest.mark.parametrize(
    "data",
    [
        {"sku": "snack-7", "qty": 1},
        {"sku": "s" * 64, "qty": 1_000_000},
        {"sku": "A.b_c:d-9", "qty": 500},
    ],
)
def test_the_schema_accepts_v1_data(data: dict[str, Any]) -> None:
    assert validate_cloudevent(stock(data))["data"] == data


@pytest.mark.parametrize(
    "data",
    [
        {"qty": 1},
        {"sku": "a"},
        {"sku": "a", "qty": 1, "extra": 1},
        {"sku": "", "qty": 1},
        {"sku": "s" * 65, "qty": 1},
        {"sku": "-a", "qty": 1},
        {"sku": "ünï", "qty": 1},
        {"sku": None, "qty": 1},
        {"sku": "a", "qty": True},
        {"sku": "a", "qty": False},
        {"sku": "a", "qty": 1.0},
        {"sku": "a", "qty": "7"},
        {"sku": "a", "qty": 0},
        {"sku": "a", "qty": -3},
        {"sku": "a", "qty": 1_000_001},
    ],
)
def test_the_schema_refuses_with_v1_messages_under_data(data: dict[str, Any]) -> None:
    # The v1 check of the flat form says what is wrong; the schema says the same of data.
    with pytest.raises(InvalidEvent) as v1_error:
        v1_validate({"id": "order-1", **data})
    with pytest.raises(InvalidEvent) as error:
        validate_cloudevent(stock(data))
    assert error.value.field == f"data.{v1_error.value.field}"
    assert str(error.value) == f"data.{v1_error.value}"


@pytest.mark.parametrize("data", [[1], "snack", 7, True])
def test_the_schema_refuses_data_that_is_not_an_object(data: object) -> None:
    with pytest.raises(InvalidEvent) as error:
        validate_cloudevent(stock(data))
    assert error.value.field == "data"
    assert str(error.value).startswith("data: must be a JSON object")


def test_the_schema_refuses_an_event_without_data() -> None:
    event = stock(None)
    with pytest.raises(InvalidEvent, match=r"^data: missing"):
        validate_cloudevent(event)


def test_the_schema_runs_whatever_registry_is_given() -> None:
    with pytest.raises(InvalidEvent, match=r"^data\.qty: "):
        validate_cloudevent(stock({"sku": "a", "qty": 0}), types=ackledger.EventTypes())


def test_validate_keeps_v1s_flat_check() -> None:
    order = {"id": "order-1", "sku": "snack-7", "qty": 7}
    clean = warehouse.validate(order)
    assert clean == order
    assert clean is not order
    bad: object
    for bad in ({"id": "o", "sku": "s"}, {**order, "extra": 1}, {**order, "qty": True}, []):
        with pytest.raises(InvalidEvent) as error:
            warehouse.validate(bad)
        with pytest.raises(InvalidEvent) as v1_error:
            v1_validate(bad)
        assert (str(error.value), error.value.field) == (str(v1_error.value), v1_error.value.field)


def test_validate_event_is_v2() -> None:
    event = warehouse.event("order-1", "snack-7", 7)
    assert ackledger.validate_event(event) == event
    # The lab's flat order is not an event any more; warehouse.validate keeps v1's check.
    with pytest.raises(InvalidEvent) as error:
        ackledger.validate_event({"id": "order-1", "sku": "snack-7", "qty": 7})
    assert error.value.field == "specversion"
    assert warehouse.validate({"id": "order-1", "sku": "snack-7", "qty": 7})["qty"] == 7
