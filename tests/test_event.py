from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ackledger.event
from ackledger import InvalidEvent
from ackledger._core import canonical, identifier, strict_json
from ackledger.event import canonical_json, fingerprint
from ackledger.warehouse import v1
from ackledger.warehouse import validate as validate_event

GOOD = {"id": "order-1", "sku": "snack", "qty": 7}


def test_returns_a_new_equal_dict() -> None:
    source = dict(GOOD)
    clean = validate_event(source)
    assert clean == GOOD
    assert clean is not source
    clean["qty"] = 99
    assert source["qty"] == 7


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"sku": "a", "qty": 1}, "id"),
        ({"id": "a", "qty": 1}, "sku"),
        ({"id": "a", "sku": "b"}, "qty"),
        ({**GOOD, "extra": 1}, "extra"),
        ({**GOOD, "id": ""}, "id"),
        ({**GOOD, "id": "x" * 129}, "id"),
        ({**GOOD, "id": "-starts-with-dash"}, "id"),
        ({**GOOD, "id": "has space"}, "id"),
        ({**GOOD, "id": "ünïcode"}, "id"),
        ({**GOOD, "id": 12}, "id"),
        ({**GOOD, "sku": "s" * 65}, "sku"),
        ({**GOOD, "sku": None}, "sku"),
        ({**GOOD, "qty": True}, "qty"),
        ({**GOOD, "qty": 1.0}, "qty"),
        ({**GOOD, "qty": "7"}, "qty"),
        ({**GOOD, "qty": 0}, "qty"),
        ({**GOOD, "qty": -3}, "qty"),
        ({**GOOD, "qty": 1_000_001}, "qty"),
        ({**GOOD, "qty": None}, "qty"),
    ],
)
def test_refusals_name_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        validate_event(event)
    assert info.value.field == field
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, [], "id", 5, [("id", "a")]])
def test_non_objects_are_refused(value: object) -> None:
    with pytest.raises(InvalidEvent, match="event"):
        validate_event(value)


def test_boundaries_are_accepted() -> None:
    assert validate_event({"id": "x" * 128, "sku": "s" * 64, "qty": 1_000_000})["qty"] == 1_000_000
    assert validate_event({"id": "9.a_b:c-d", "sku": "Z", "qty": 1})["id"] == "9.a_b:c-d"


def test_fingerprint_ignores_key_order_and_whitespace() -> None:
    assert canonical_json({"qty": 1, "id": "a"}) == '{"id":"a","qty":1}'
    assert fingerprint({"qty": 1, "id": "a", "sku": "s"}) == fingerprint(
        {"id": "a", "sku": "s", "qty": 1}
    )
    assert fingerprint({"id": "a", "sku": "s", "qty": 1}) != fingerprint(
        {"id": "a", "sku": "s", "qty": 2}
    )


IDENT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,40}", fullmatch=True)


@given(IDENT, IDENT, st.integers(min_value=1, max_value=1_000_000))
def test_every_valid_event_round_trips(event_id: str, sku: str, qty: int) -> None:
    event = {"id": event_id, "sku": sku, "qty": qty}
    assert validate_event(event) == event


def test_the_names_v1_published_still_import_from_where_each_rule_lives() -> None:
    homes = (canonical, identifier, strict_json, v1)
    for name in ackledger.event.__all__:
        value = getattr(ackledger.event, name)
        assert any(getattr(home, name, None) is value for home in homes), name
        assert getattr(value, "__module__", "") != "ackledger.event", f"{name}: a second copy"
    assert set(ackledger.event.__all__) >= {
        "check_identifier",
        "check_keys",
        "check_quantity",
        "parse_strict_json",
        "validate_event",
    }
