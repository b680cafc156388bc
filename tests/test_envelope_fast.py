"""The fast path of event validation (``envelope.fast``) agrees with the full rules: whatever
it accepts, the full check accepts and returns equal; whatever the full check refuses, the
fast path does not accept."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackledger import EventTypes, InvalidEvent, warehouse
from ackledger.envelope import canonical_json, validate
from ackledger.envelope.fast import fast_encoded
from ackledger.envelope.validate import _validate_fully

TYPES = EventTypes()

texts = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
attribute_values = st.one_of(
    st.sampled_from(["1.0", "0.3", "e-1", "/orders", "urn:x:y", "a b", "", "order.placed"]),
    texts,
    st.integers(),
    st.none(),
)
names = st.sampled_from(
    ["specversion", "id", "source", "type", "subject", "partitionkey", "datacontenttype"]
)


def full(obj: object) -> dict[str, Any] | None:
    try:
        return _validate_fully(obj, TYPES)[0]
    except InvalidEvent:
        return None


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(names, attribute_values), st.none() | json_values, st.booleans())
def test_fast_never_accepts_what_the_full_rules_refuse(
    attributes: dict[str, Any], data: Any, with_data: bool
) -> None:
    obj: dict[str, Any] = {"specversion": "1.0", "id": "e-1", "source": "/s", "type": "t"}
    obj.update(attributes)
    if with_data:
        obj["data"] = data
    quick = fast_encoded(obj, TYPES)
    if quick is not None:
        assert quick[0] == full(obj)
        # The text made in the same pass is the sorting encoder's, byte for byte.
        assert quick[1] == canonical_json(quick[0])


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_fast_copies_plain_data_as_the_full_rules_do(data: Any) -> None:
    obj = {"specversion": "1.0", "id": "e-1", "source": "/s", "type": "t", "data": data}
    quick = fast_encoded(obj, TYPES)
    if quick is not None:
        assert quick[0] == full(obj)
        if isinstance(data, dict | list):
            assert quick[0]["data"] is not data  # a copy, never the caller's object


flat_values = st.none() | st.booleans() | st.integers() | texts | st.integers(2**52, 2**60)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(texts, flat_values, max_size=6))
def test_flat_data_is_written_as_the_sorting_encoder_writes_it(data: dict[str, Any]) -> None:
    """Flat data (text, integers, booleans, nulls) has its text written by the fast path
    itself: byte for byte the canonical JSON, so fingerprints do not change."""
    obj = {"specversion": "1.0", "id": "e-1", "source": "/s", "type": "t", "data": data}
    quick = fast_encoded(obj, TYPES)
    if quick is None:
        assert full(obj) is None
        return
    assert quick[0] == full(obj)
    assert list(quick[0]["data"]) == list(data)  # the members in the order given
    assert quick[0]["data"] is not data
    assert quick[1] == canonical_json(quick[0])


@pytest.mark.parametrize(
    ("data", "accepted"),
    [
        ({"sku": "tea", "qty": 2}, True),
        ({"sku": "tea", "qty": True}, False),
        ({"sku": "tea", "qty": 0}, False),
        ({"sku": "t" * 65, "qty": 1}, False),
        ({"sku": "tea", "qty": 1, "x": 1}, False),
    ],
)
def test_the_warehouse_schema_on_the_fast_path(data: dict[str, Any], accepted: bool) -> None:
    obj = {
        "specversion": "1.0", "id": "e-1", "source": "/s", "type": warehouse.TYPE, "data": data,
    }  # fmt: skip
    quick = fast_encoded(obj, TYPES)
    assert (quick is not None) == accepted
    assert (full(obj) is not None) == accepted
    if quick is not None:
        assert quick[1] == canonical_json(quick[0])


@pytest.mark.parametrize(
    "attributes",
    [
        {"source": "https://u:p@[::1]:8080/a;b=c/%7E?q=1&r=(2)*+,!$'#frag"},
        {"source": "urn:shop:orders", "subject": 'say "hi" \\ back', "partitionkey": "ké-ü"},
        {"datacontenttype": "application/json", "subject": "\u00e9\u4e2d"},
        {"datacontenttype": "application/json", "data": {"b": [1.5, -0.0, 10**20], "a": '"'}},
        {"type": warehouse.TYPE, "data": {"sku": "tea:1.x_y-z", "qty": 1_000_000}},
        {
            "type": warehouse.TYPE,
            "data": {"qty": 7, "sku": "t"},
            "datacontenttype": "application/json",
        },
    ],
)
def test_the_fast_text_is_the_canonical_json(attributes: dict[str, Any]) -> None:
    obj = {"specversion": "1.0", "id": "A.b:c_d-9", "source": "/s", "type": "t", **attributes}
    quick = fast_encoded(obj, TYPES)
    assert quick is not None
    assert quick[0] == full(obj)
    assert quick[1] == canonical_json(quick[0])


def test_a_subclass_or_a_null_member_goes_the_full_way() -> None:
    class Text(str):
        pass

    base = {"specversion": "1.0", "id": "e-1", "source": "/s", "type": "t"}
    assert fast_encoded({**base, "id": Text("e-1")}, TYPES) is None
    assert fast_encoded({**base, "subject": None}, TYPES) is None
    assert fast_encoded({**base, "time": "2026-12-01T00:00:00Z"}, TYPES) is None


class _TwoFaced(dict[str, Any]):
    """A mapping whose items (what a copy and the encoder read) and whose ``[]`` (what a
    schema reads) disagree."""

    def __getitem__(self, key: str) -> Any:
        return 500 if key == "qty" else super().__getitem__(key)


def test_the_reference_schema_is_given_only_an_exact_dict_on_the_fast_path() -> None:
    # The full rules copy ``data`` to plain values before the schema sees it; a subclass
    # handed to the schema as it is could make the fast path return another event.
    obj = {
        "specversion": "1.0", "id": "e-1", "source": "/s", "type": warehouse.TYPE,
        "data": _TwoFaced(sku="tea", qty=1),
    }  # fmt: skip
    assert fast_encoded(obj, TYPES) is None
    assert validate.validate_encoded(obj, types=TYPES) == _validate_fully(obj, TYPES)
    assert validate.validate_encoded(obj, types=TYPES)[0]["data"] == {"sku": "tea", "qty": 1}
