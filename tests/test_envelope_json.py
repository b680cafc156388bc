"""CONTRACT v2 section 1: data as any JSON value, the canonical JSON, identity, fingerprint,
the size cap, and copies that share nothing with the argument."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ackledger
from ackledger.envelope import (
    MAX_EVENT_BYTES,
    canonical_json,
    content_fingerprint,
    fingerprint_of,
    identity,
    validate_cloudevent,
)
from ackledger.envelope.json_value import MAX_DEPTH
from tests.envelopehelp import BASE, TRACEPARENT, refused

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # hypothesis text has no lone surrogates
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def with_data(data: object) -> dict[str, Any]:
    return {**BASE, "data": data}


@pytest.mark.parametrize(
    "data",
    [0, -1, 10**40, 1.5, -0.0, "", "text", True, False, [], {}, [1, "a", None], {"a": {"b": [{}]}}],
)
def test_any_json_value_is_data(data: object) -> None:
    assert validate_cloudevent(with_data(data))["data"] == data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (float("nan"), "data"),
        (float("inf"), "data"),
        ([1, float("-inf")], "data[1]"),
        ({"a": {"b": float("nan")}}, "data.a.b"),
        ({1: "x"}, "data"),
        ({"a": {(1, 2): "x"}}, "data.a"),
        ({"a": {None: "x"}}, "data.a"),
        ("\ud800", "data"),
        (["ok", "lone \udfff"], "data[1]"),
        ({"k\ud800": 1}, "data"),
        ({"a": {1, 2}}, "data.a"),
        ({"a": b"bytes"}, "data.a"),
        ({"a": object()}, "data.a"),
        ({"odd key": [0, complex(1, 2)]}, 'data["odd key"][1]'),
    ],
)
def test_what_json_cannot_hold_is_refused_naming_the_place(data: object, field: str) -> None:
    error = refused(with_data(data))
    assert error.field == field
    assert str(error).startswith(f"{field}: ")


def test_nesting_is_capped() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert validate_cloudevent(with_data(deep))["data"] == deep
    error = refused(with_data([deep]))
    assert error.field is not None
    assert error.field.startswith("data[0]")
    assert f"deeper than {MAX_DEPTH}" in str(error)


def test_containers_become_plain_dicts_and_lists() -> None:
    data = OrderedDict(a=(1, 2), b=[(3,)])
    copied = validate_cloudevent(with_data(data))["data"]
    assert copied == {"a": [1, 2], "b": [[3]]}
    assert type(copied) is dict
    assert type(copied["a"]) is list


def test_number_subclasses_become_plain_numbers() -> None:
    class Loud(int):
        def __int__(self) -> int:
            return 999

    class Drifting(float):
        def __float__(self) -> float:
            return 0.0

    copied = validate_cloudevent(with_data([Loud(3), Drifting(2.5)]))["data"]
    assert copied == [3, 2.5]
    assert [type(v) for v in copied] == [int, float]


def test_canonical_json_is_sorted_compact_and_unescaped() -> None:
    event = validate_cloudevent({**BASE, "data": {"b": 1.0, "a": ["é", 10**20]}, "ext": True})
    assert canonical_json(event) == (
        '{"data":{"a":["é",100000000000000000000],"b":1.0},"ext":true,'
        '"id":"order-1","source":"/orders-service","specversion":"1.0",'
        '"type":"com.example.order.placed"}'
    )


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


@given(json_values)
def test_canonical_json_round_trips(data: object) -> None:
    event = validate_cloudevent(with_data(data))
    text = canonical_json(event)
    assert json.loads(text) == event
    assert canonical_json(json.loads(text)) == text
    assert validate_cloudevent(json.loads(text)) == event


@given(json_values, st.randoms(use_true_random=False))
def test_canonical_json_ignores_key_order(data: object, rnd: Any) -> None:
    event = validate_cloudevent({**BASE, "data": data, "ext": 1, "subject": "s"})
    items = list(event.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(event)
    assert content_fingerprint(dict(items)) == content_fingerprint(event)


def test_identity_is_source_and_id() -> None:
    assert identity(validate_cloudevent(BASE)) == ("/orders-service", "order-1")


@given(
    json_values,
    st.sampled_from(["2024-01-01T00:00:00Z", "2030-06-30T12:00:00.5+09:00"]),
    st.sampled_from([TRACEPARENT, "00-" + "1" * 32 + "-" + "2" * 16 + "-00"]),
    st.sampled_from(["", "a=1", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"]),
)
def test_the_fingerprint_ignores_time_and_trace(data: object, time: str, tp: str, ts: str) -> None:
    plain = validate_cloudevent(with_data(data))
    traced = validate_cloudevent(
        {**with_data(data), "time": time, "traceparent": tp, "tracestate": ts}
    )
    assert content_fingerprint(traced) == content_fingerprint(plain)


@pytest.mark.parametrize(
    "change",
    [
        {"id": "order-2"},
        {"source": "/other"},
        {"type": "com.example.other"},
        {"subject": "s"},
        {"partitionkey": "p"},
        {"data": {"qty": 8}},
        {"data": {"qty": 7.0}},
        {"data": {"qty": True}},
        {"ext": "x"},
    ],
)
def test_the_fingerprint_sees_all_other_content(change: dict[str, Any]) -> None:
    one = validate_cloudevent({**BASE, "data": {"qty": 7}})
    other = validate_cloudevent({**one, **change})
    assert content_fingerprint(other) != content_fingerprint(one)


def test_datacontenttype_json_is_not_content() -> None:
    # Binary mode always carries it (the Content-Type); structured mode may leave it out.
    one = validate_cloudevent({**BASE, "data": {"qty": 7}})
    binary = validate_cloudevent({**one, "datacontenttype": "application/json"})
    assert content_fingerprint(binary) == content_fingerprint(one)


@pytest.mark.parametrize(
    "declared", ["application/json; charset=utf-8", "text/plain", "application/xml"]
)
def test_any_other_media_type_is_content(declared: str) -> None:
    one = validate_cloudevent({**BASE, "data": "<a/>"})
    other = validate_cloudevent({**one, "datacontenttype": declared})
    assert content_fingerprint(other) != content_fingerprint(one)
    assert fingerprint_of(other, canonical_json(other)) == content_fingerprint(other)


def test_fingerprints_made_before_stay_the_same() -> None:
    # The hashes of two events as this release's predecessors stored them in receipts.
    lab = validate_cloudevent(
        {**BASE, "type": "warehouse.stock.added", "data": {"sku": "a", "qty": 1}}
    )
    binary = {**lab, "datacontenttype": "application/json", "subject": "a", "ext": "x"}
    assert content_fingerprint(lab) == (
        "055cad2991fdadcb5b4560d81166026b142f38407aed704ac21687c0c4e00f54"
    )
    assert content_fingerprint(validate_cloudevent(binary)) == (
        "6f698ac87e7fa9151446790857637dc751e5994812ebc03b5d09d4c6fa019f61"
    )


def test_the_fingerprint_is_a_sha256_of_the_canonical_content() -> None:
    import hashlib

    event = validate_cloudevent({**BASE, "time": "2024-01-01T00:00:00Z", "data": [1]})
    content = {k: v for k, v in event.items() if k != "time"}
    assert (
        content_fingerprint(event) == hashlib.sha256(canonical_json(content).encode()).hexdigest()
    )


def test_the_size_cap_counts_utf8_bytes_of_the_canonical_json() -> None:
    assert MAX_EVENT_BYTES == 64 * 1024 == ackledger.MAX_EVENT_BYTES
    room = MAX_EVENT_BYTES - len(canonical_json(with_data("")).encode())
    exact = validate_cloudevent(with_data("x" * room))
    assert len(canonical_json(exact).encode("utf-8")) == MAX_EVENT_BYTES
    error = refused(with_data("x" * (room + 1)))
    assert error.field == "event"
    assert str(MAX_EVENT_BYTES) in str(error)
    # "é" is one character and two bytes: the cap is on bytes
    assert refused(with_data("é" * (room // 2 + 1))).field == "event"
    assert validate_cloudevent(with_data("é" * (room // 2)))


def test_the_result_shares_nothing_with_the_argument() -> None:
    given_data: dict[str, Any] = {"items": [{"sku": "a"}], "meta": {"n": 1}}
    argument = with_data(given_data)
    event = validate_cloudevent(argument)
    assert event is not argument
    assert event["data"] is not given_data
    given_data["items"][0]["sku"] = "changed"
    given_data["meta"]["n"] = 2
    assert event["data"] == {"items": [{"sku": "a"}], "meta": {"n": 1}}
    event["data"]["items"].append("new")
    event["data"]["meta"].clear()
    assert given_data == {"items": [{"sku": "changed"}], "meta": {"n": 2}}


@given(json_values)
def test_copies_are_independent_at_every_depth(data: object) -> None:
    original = json.loads(json.dumps(data))
    argument = with_data(original)
    event = validate_cloudevent(argument)
    _scramble(event.get("data"))
    assert argument["data"] == json.loads(json.dumps(data))
    again = validate_cloudevent(argument)
    _scramble(argument["data"])
    assert again.get("data") == json.loads(json.dumps(data))


def _scramble(value: object) -> None:
    if isinstance(value, dict):
        for item in list(value.values()):
            _scramble(item)
        value["scrambled"] = True
    elif isinstance(value, list):
        for item in value:
            _scramble(item)
        value.append("scrambled")


def test_an_integer_too_long_to_write_as_text_is_refused_naming_its_place() -> None:
    # json.dumps cannot write an int of more than sys.get_int_max_str_digits() digits (4300
    # by default): validation says so as InvalidEvent, never as a bare ValueError of the
    # encoder, on the fast path (plain data) and the full one (a subject) alike.
    assert refused({**BASE, "data": {"n": [1, 10**5000]}}).field == "data.n[1]"
    assert refused({**BASE, "data": {"n": [1, 10**5000]}, "subject": "s"}).field == "data.n[1]"
    # The longest that can be written is carried, as the encoder writes it.
    longest = 10**4299
    event = validate_cloudevent({**BASE, "data": {"n": longest}, "ext": "x"})
    assert event["data"] == {"n": longest}
    assert canonical_json(event).count(str(longest)) == 1
