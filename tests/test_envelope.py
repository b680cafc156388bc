"""CONTRACT sections 1 and 13: each rule of the CloudEvents envelope, passing and failing."""

from __future__ import annotations

from typing import Any

import pytest

from ackledger.envelope import validate_cloudevent
from tests.envelopehelp import BASE, TRACEPARENT, refused


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("id", "a"),
        ("id", "9"),
        ("id", "A.b_c:d-e"),
        ("id", "x" * 256),
        ("id", "-dash-first"),
        ("id", "a/b c+d=e"),
        ("id", "ünïcode 在庫"),
        ("id", "0125830f-16da-47f4-b33d-6332fcdfd61b"),
        ("source", "/orders-service"),
        ("source", "urn:shop:orders"),
        ("source", "orders"),
        ("source", "https://example.com/orders?x=1#top"),
        ("source", "http://[::1]:8080/events"),
        ("source", "//host.example/p"),
        ("source", "mailto:ops@example.com"),
        ("source", "tag:example.com,2024:orders"),
        ("source", "/a%20b"),
        ("source", "/" + "s" * 255),
        ("type", "com.example.order.placed"),
        ("type", "t"),
        ("type", "T" * 256),
        ("type", "-odd.but:allowed_"),
        ("type", "orders/placed v2"),
        ("subject", "snack-7"),
        ("subject", "x" * 256),
        ("subject", "在庫 7\u3000個"),
        ("subject", "with spaces and 😀"),
        ("time", "2024-01-01T00:00:00Z"),
        ("time", "1985-04-12t23:20:50.52z"),
        ("time", "1996-12-19T16:39:57-08:00"),
        ("time", "2024-02-29T23:59:60.123456789+05:30"),
        ("time", "2026-12-01T10:19:24.269572+00:00"),
        ("time", "0000-01-01T00:00:00-00:00"),
        ("datacontenttype", "application/json"),
        ("datacontenttype", "application/json; charset=utf-8"),
        ("datacontenttype", "APPLICATION/JSON"),
        ("datacontenttype", "application/vnd.example+json"),
        ("datacontenttype", "text/plain"),
        ("datacontenttype", 'text/plain; charset="us-ascii"'),
        ("datacontenttype", "application/xml"),
        ("partitionkey", "snack-7"),
        ("partitionkey", "k" * 256),
        ("traceparent", TRACEPARENT),
        ("traceparent", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"),
        ("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        ("tracestate", ""),
        ("tracestate", " a=1 ,\t, tenant@system=x y"),
        ("tracestate", ",".join(f"k{i}=v" for i in range(32))),
        ("comexampleext", "value"),
        ("x", 0),
        ("n1", -(2**31)),
        ("count", 2**31 - 1),
        ("flag", False),
        ("a" * 20, ""),
        ("a" * 64, "long names are allowed"),
        ("when", "2024-01-01T00:00:00Z"),
        ("where", "https://example.com/x"),
        ("dataschema", "https://example.com/schema"),
        ("dataschema", "urn:example:schema"),
    ],
)
def test_accepted_values_are_kept(name: str, value: object) -> None:
    event = validate_cloudevent({**BASE, name: value})
    assert event[name] == value
    assert type(event[name]) is type(value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("specversion", "1"),
        ("specversion", "0.3"),
        ("specversion", 1.0),
        ("id", ""),
        ("id", "x" * 257),
        ("id", "line\nbreak"),
        ("id", "nul\x00"),
        ("id", "bidi\u202e"),
        ("id", "lone \udc00"),
        ("id", 12),
        ("source", ""),
        ("source", "/" + "s" * 256),
        ("source", "has space"),
        ("source", "/ünï"),
        ("source", "%zz"),
        ("source", "http://[::1/x"),
        ("source", "http://[zz::1]/"),
        ("source", "http://host:port/"),
        ("source", "a#b#c"),
        ("source", "1http:x"),
        ("source", "/line\nbreak"),
        ("source", 7),
        ("type", ""),
        ("type", "T" * 257),
        ("type", "tab\there"),
        ("type", "c1\x85"),
        ("type", ["a"]),
        ("subject", ""),
        ("subject", "x" * 257),
        ("subject", "line\nbreak"),
        ("subject", "tab\there"),
        ("subject", "nul\x00"),
        ("subject", "del\x7f"),
        ("subject", "c1\x85"),
        ("subject", "sep\u2028"),
        ("subject", "bidi\u202e"),
        ("subject", 5),
        ("subject", "lone \udc00"),
        ("source", "/lone\ud800"),
        ("time", "2024-01-01T00:00:00Z\ud800"),
        ("time", "2024-01-01 00:00:00Z"),
        ("time", "2024-01-01T00:00:00"),
        ("time", "2023-02-29T00:00:00Z"),
        ("time", "2024-04-31T00:00:00Z"),
        ("time", "2024-13-01T00:00:00Z"),
        ("time", "2024-00-01T00:00:00Z"),
        ("time", "2024-01-00T00:00:00Z"),
        ("time", "2024-01-01T24:00:00Z"),
        ("time", "2024-01-01T00:60:00Z"),
        ("time", "2024-01-01T00:00:61Z"),
        ("time", "2024-01-01T00:00:00+24:00"),
        ("time", "2024-01-01T00:00:00+01:60"),
        ("time", "2024-01-01T00:00:00+0100"),
        ("time", "2024-01-01T00:00:00.Z"),
        ("time", "2024-1-01T00:00:00Z"),
        ("time", "\uff12024-01-01T00:00:00Z"),
        ("time", 1704067200),
        ("datacontenttype", ""),
        ("datacontenttype", "json"),
        ("datacontenttype", "text/"),
        ("datacontenttype", "text/plain; charset"),
        ("datacontenttype", "text/plain\n"),
        ("datacontenttype", 1),
        ("dataschema", ""),
        ("dataschema", "/relative/schema.json"),
        ("dataschema", "schema.json"),
        ("dataschema", "https://bad host/"),
        ("dataschema", 5),
        ("partitionkey", ""),
        ("partitionkey", "k" * 257),
        ("partitionkey", "a\rb"),
        ("partitionkey", 3),
        ("traceparent", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("traceparent", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01"),
        ("traceparent", TRACEPARENT.upper()),
        ("traceparent", TRACEPARENT + "-more"),
        ("traceparent", TRACEPARENT[:-3]),
        ("traceparent", "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("traceparent", 0),
        ("tracestate", "a=1,a=2"),
        ("tracestate", "Upper=1"),
        ("tracestate", "a="),
        ("tracestate", "a=b=c"),
        ("tracestate", "novalue"),
        ("tracestate", "1simple=x"),
        ("tracestate", ",".join(f"k{i}=v" for i in range(33))),
        ("tracestate", ["a=1"]),
        ("Upper", "x"),
        ("with_underscore", "x"),
        ("dash-name", "x"),
        ("ext", 1.5),
        ("ext", -2.5),
        ("ext", 2**31),
        ("ext", -(2**31) - 1),
        ("ext", 10**30),
        ("ext", "\x01"),
        ("ext", "line\nbreak"),
        ("ext", [1]),
        ("ext", {"a": 1}),
        ("ext", float("nan")),
        ("ext", float("inf")),
        ("ext", "\ud800"),
        ("ext", b"bytes"),
    ],
)
def test_refused_values_name_the_attribute(name: str, value: object) -> None:
    error = refused({**BASE, name: value})
    assert error.field == name
    assert str(error).startswith(f"{name}: ")
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("name", ["specversion", "id", "source", "type"])
def test_required_attributes(name: str) -> None:
    event = {k: v for k, v in BASE.items() if k != name}
    error = refused(event)
    assert (error.field, str(error)) == (name, f"{name}: missing")
    # null is the CloudEvents JSON format's way of saying "absent"
    assert refused({**BASE, name: None}).field == name


def test_the_minimal_event_is_valid_and_equal_not_same() -> None:
    event = validate_cloudevent(BASE)
    assert event == BASE
    assert event is not BASE


@pytest.mark.parametrize("value", [None, [], "event", 5, [("id", "a")]])
def test_non_objects_are_refused(value: object) -> None:
    error = refused(value)
    assert error.field == "event"
    assert str(error).startswith("event: must be a JSON object")


def test_non_string_attribute_names_are_refused() -> None:
    event: dict[Any, Any] = dict(BASE)
    event[1] = "x"
    error = refused(event)
    assert error.field == "event"
    assert "strings" in str(error)


def test_a_lone_surrogate_in_an_attribute_name_is_refused() -> None:
    assert refused({**BASE, "ext\udc00": "x"}).field == "event"


def test_null_optional_attributes_are_treated_as_absent() -> None:
    event = validate_cloudevent({**BASE, "subject": None, "time": None, "ext": None})
    assert event == BASE
    assert validate_cloudevent({**BASE, "data": None}) == BASE


def test_binary_data_travels_as_data_base64() -> None:
    event = validate_cloudevent({**BASE, "datacontenttype": "image/png", "data_base64": "iVBO"})
    assert event["data_base64"] == "iVBO"
    assert validate_cloudevent({**BASE, "data_base64": ""})["data_base64"] == ""


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"data_base64": "aGVsbG8"}, "data_base64"),  # unpadded
        ({"data_base64": "aGV sbG8="}, "data_base64"),
        ({"data_base64": 5}, "data_base64"),
        ({"data_base64": "aGVsbG8=", "data": "hello"}, "data_base64"),
        ({"datacontenttype": "text/plain", "data": {"a": 1}}, "data"),
        ({"datacontenttype": "application/xml", "data": 5}, "data"),
    ],
)
def test_data_must_fit_its_media_type(extra: dict[str, Any], field: str) -> None:
    assert refused({**BASE, **extra}).field == field


@pytest.mark.parametrize(
    "declared", [None, "application/json", "application/json; charset=utf-8", "a/b+json"]
)
def test_a_json_media_type_carries_any_json_value(declared: str | None) -> None:
    shown = {} if declared is None else {"datacontenttype": declared}
    for data in ({"a": [1, 2.5]}, [1], "text", 3, True):
        assert validate_cloudevent({**BASE, **shown, "data": data})["data"] == data


def test_a_text_media_type_carries_a_string() -> None:
    xml = {**BASE, "datacontenttype": "application/xml", "data": "<a>\n\t1</a>"}
    assert validate_cloudevent(xml) == xml


def test_an_unprintable_extension_name_is_shown_quoted_and_cut() -> None:
    name = "bad\nname" + "x" * 100
    message = str(refused({**BASE, name: 1}))
    assert "\n" not in message
    assert message.startswith('"bad\\nname')
    assert len(message) < 200


def test_booleans_are_kept_as_booleans() -> None:
    event = validate_cloudevent({**BASE, "flag": True, "data": [True, 1, False, 0]})
    assert event["flag"] is True
    assert [type(v) for v in event["data"]] == [bool, int, bool, int]


def test_str_subclasses_become_plain_str() -> None:
    class Sneaky(str):
        def __str__(self) -> str:
            return "other"

    event = validate_cloudevent(
        {
            Sneaky("specversion"): "1.0",
            **{k: Sneaky(v) for k, v in BASE.items() if k != "specversion"},
        }
    )
    assert event == BASE
    assert all(type(k) is str for k in event)
    assert all(type(v) is str for v in event.values())


def test_the_first_broken_rule_is_reported_in_a_fixed_order() -> None:
    broken = {**BASE, "id": "", "type": "", "subject": "", "ext": []}
    assert refused(broken).field == "id"
    assert refused({**broken, "id": "ok"}).field == "type"
    assert refused({**broken, "id": "ok", "type": "t"}).field == "subject"
    # data comes before subject, so a schema speaks before attributes made from the data
    assert refused({**broken, "id": "ok", "type": "t", "data": float("nan")}).field == "data"


def test_the_result_has_the_same_attributes_whatever_the_input_order() -> None:
    shuffled = dict(reversed(list({**BASE, "zz": 1, "aa": 2, "subject": "s"}.items())))
    assert validate_cloudevent(shuffled) == {**BASE, "zz": 1, "aa": 2, "subject": "s"}
