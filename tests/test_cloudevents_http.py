"""The CloudEvents HTTP binding on the sink's side (``web.cloudevents_http``): structured,
binary and batch requests to the events they carry, the refusals of every other form, and
the CNCF SDK's own requests decoded to the same event in both modes."""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote

import pytest
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent as CoreEvent
from cloudevents.v1.http import CloudEvent as LegacyEvent
from cloudevents.v1.http import to_binary as legacy_to_binary
from cloudevents.v1.http import to_structured as legacy_to_structured
from hypothesis import given
from hypothesis import strategies as st

from ackledger import InvalidEvent
from ackledger.envelope import validate_cloudevent
from ackledger.envelope.message import decode_message
from ackledger.web.cloudevents_http import (
    _STRUCTURED_EXACT,
    BATCH,
    BINARY,
    STRUCTURED,
    UnsupportedMedia,
    content_mode,
    decode_batch,
    decode_event,
    structured_content_type,
)
from tests.envelopehelp import BASE, TRACEPARENT

Headers = list[tuple[bytes, bytes]]

STRUCTURED_TYPE = (b"content-type", b"application/cloudevents+json")
BATCH_TYPE = (b"content-type", b"application/cloudevents-batch+json")
JSON_TYPE = (b"content-type", b"application/json")
BASE_HEADERS: Headers = [
    (b"ce-specversion", b"1.0"),
    (b"ce-id", b"order-1"),
    (b"ce-source", b"/orders-service"),
    (b"ce-type", b"com.example.order.placed"),
]


def asgi(headers: dict[str, str]) -> Headers:
    """Headers as an ASGI server hands them over: lowercase names, bytes."""
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]


def body_of(obj: object) -> bytes:
    return json.dumps(obj).encode("utf-8")


def refusal(headers: Headers, body: bytes, *, batch: bool = False) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        (decode_batch if batch else decode_event)(headers, body)
    assert "\n" not in str(caught.value)
    return caught.value


# --- structured mode


@pytest.mark.parametrize(
    "content_type",
    [
        b"application/cloudevents+json",
        b"application/cloudevents+json; charset=utf-8",
        b"application/cloudevents+json;charset=UTF-8",
        b'application/cloudevents+json; charset="utf-8"',
        b"Application/CloudEvents+JSON ; Charset=Utf-8",
    ],
)
def test_a_structured_event_is_the_json_object_of_the_body(content_type: bytes) -> None:
    event = {**BASE, "data": {"sku": "在庫", "qty": 7}}
    assert decode_event([(b"content-type", content_type)], body_of(event)) == event
    assert content_mode(content_type) == STRUCTURED
    assert structured_content_type(content_type)
    assert structured_content_type(content_type.decode())


def test_in_structured_mode_the_body_speaks_and_ce_headers_are_not_read() -> None:
    headers = [(b"host", b"127.0.0.1"), (b"ce-id", b"other"), STRUCTURED_TYPE, (b"ce-x", b"%zz")]
    assert decode_event(headers, body_of(BASE)) == BASE


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[]", "must be a JSON object, got list"),
        (b'"order-1"', "must be a JSON object, got string"),
        (b"null", "must be a JSON object, got null"),
        (b"", "not valid JSON"),
        (b'{"id": "a",', "not valid JSON"),
        (b'{"id": "a", "id": "b"}', "'id' appears twice"),
        (b'{"id": "caf\xe9"}', "not UTF-8"),
        (b'\xef\xbb\xbf{"id": "a"}', "not valid JSON"),  # a BOM is not JSON
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_a_structured_body_that_is_not_one_json_object(body: bytes, said: str) -> None:
    refused = refusal([STRUCTURED_TYPE], body)
    assert refused.field == "body" and said in str(refused), refused


# --- content types


@pytest.mark.parametrize(
    ("content_type", "unsupported"),
    [
        (b"application/cloudevents+avro", True),
        (b"application/cloudevents", True),
        (b"application/cloudevents-batch+protobuf", True),
        (b"", False),
        (b"text", False),
        (b"application/cloudevents+json; charset=latin-1", True),
        (b"application/json; charset=utf-16", True),
        (b"application/cloudevents+json; charset", False),
        (b"application/cloudevents+json; =utf-8", False),
    ],
)
def test_another_format_or_charset_is_415_a_malformed_one_400(
    content_type: bytes, unsupported: bool
) -> None:
    refused = refusal([(b"content-type", content_type), *BASE_HEADERS], body_of(BASE))
    assert refused.field == "content-type" and str(refused).startswith("content-type: ")
    assert isinstance(refused, UnsupportedMedia) is unsupported
    assert not structured_content_type(content_type)
    with pytest.raises(InvalidEvent):
        content_mode(content_type)


@pytest.mark.parametrize(
    "content_type",
    [b"text/plain", b"application/x-www-form-urlencoded", b"application/json", b"image/png"],
)
def test_a_media_type_without_ce_headers_is_no_cloudevent(content_type: bytes) -> None:
    refused = refusal([(b"content-type", content_type)], body_of(BASE))
    assert isinstance(refused, UnsupportedMedia) and "ce- headers" in str(refused)
    # With them, it is binary mode: the body is the data, of that media type.
    assert content_mode(content_type) == BINARY


def test_content_type_given_twice_is_refused_even_when_both_agree() -> None:
    for second in (STRUCTURED_TYPE, JSON_TYPE):
        refused = refusal([STRUCTURED_TYPE, *BASE_HEADERS, second], body_of(BASE))
        assert refused.field == "content-type" and "given twice" in str(refused)
    refused = refusal([BATCH_TYPE, BATCH_TYPE], b"[]", batch=True)
    assert "given twice" in str(refused)


def test_a_binary_body_without_a_content_type_is_json() -> None:
    assert "missing" in str(refusal([(b"host", b"x")], body_of(BASE)))
    # The SDK sends JSON data without one when the event has no datacontenttype.
    assert decode_event(BASE_HEADERS, b'{"a": 1}') == {**BASE, "data": {"a": 1}}
    assert refusal(BASE_HEADERS, b"<a/>").field == "body"


@pytest.mark.parametrize(
    ("content_type", "body", "data"),
    [
        (b"text/plain", b"Hello", {"data": "Hello"}),
        (b"text/plain; charset=us-ascii", b"Hello", {"data": "Hello"}),
        (b"text/plain; charset=latin-1", b"caf\xe9", {"data": "caf\u00e9"}),
        (
            b"application/xml; charset=utf-8",
            b"<a>\xf0\x9f\x8c\x8e</a>",
            {"data": "<a>\U0001f30e</a>"},
        ),
        (b"application/vnd.x+xml", b"<a/>", {"data": "<a/>"}),
        (b"application/octet-stream", b"\x00\xff", {"data_base64": "AP8="}),
        (b"image/png", b"\x89PNG", {"data_base64": "iVBORw=="}),
        (b"application/vnd.x+json", b"[1]", {"data": [1]}),
        (b"text/json", b'"s"', {"data": "s"}),
    ],
)
def test_a_binary_body_is_read_by_its_media_type(
    content_type: bytes, body: bytes, data: dict[str, Any]
) -> None:
    event = decode_event([(b"content-type", content_type), *BASE_HEADERS], body)
    assert event == {**BASE, "datacontenttype": content_type.decode(), **data}
    assert validate_cloudevent(event) == event


def test_each_route_takes_its_own_mode() -> None:
    refused = refusal([BATCH_TYPE], b"[]")
    assert refused.field == "content-type" and "batch" in str(refused)
    for one in (STRUCTURED_TYPE, JSON_TYPE):
        refused = refusal([one, *BASE_HEADERS], b"[]", batch=True)
        assert refused.field == "content-type"
        assert "application/cloudevents-batch+json" in str(refused)


@given(st.sampled_from(sorted(_STRUCTURED_EXACT)), st.binary(max_size=40))
def test_the_exact_match_shortcut_agrees_with_the_reader(content_type: bytes, body: bytes) -> None:
    def outcome(read: Any) -> tuple[str, object]:
        try:
            return "ok", read()
        except InvalidEvent as exc:
            return "refused", str(exc)

    shortcut = outcome(lambda: decode_event([(b"content-type", content_type)], body))
    reader = outcome(lambda: decode_message(content_type.decode(), [], body))
    assert shortcut == reader


def test_the_three_modes_by_content_type() -> None:
    assert content_mode(b"application/json") == BINARY
    assert content_mode(b"application/cloudevents-batch+json; charset=utf-8") == BATCH
    assert not structured_content_type(None)
    assert not structured_content_type("application/json")


# --- binary mode


def test_a_binary_event_is_its_ce_headers_with_the_body_as_data() -> None:
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json; charset=utf-8"),
        *BASE_HEADERS,
        (b"ce-subject", b"Euro%20%E2%82%AC%20%F0%9F%98%80"),
        (b"ce-time", b"2024-01-01T12:30:00Z"),
        (b"ce-partitionkey", b"customer-9"),
        (b"ce-traceparent", TRACEPARENT.encode()),
        (b"ce-tracestate", b"rojo=00f067aa0ba902b7"),
        (b"ce-region", b"eu1"),
        (b"content-length", b"27"),
    ]
    event = decode_event(headers, b'{"sku": "snack-7", "qty": 7}')
    assert event == {
        **BASE,
        "subject": "Euro € 😀",
        "time": "2024-01-01T12:30:00Z",
        "partitionkey": "customer-9",
        "traceparent": TRACEPARENT,
        "tracestate": "rojo=00f067aa0ba902b7",
        "region": "eu1",
        "datacontenttype": "application/json; charset=utf-8",  # the Content-Type, as sent
        "data": {"sku": "snack-7", "qty": 7},
    }
    assert validate_cloudevent(event)["subject"] == "Euro € 😀"


def test_the_plain_trace_headers_are_the_hops_not_the_events() -> None:
    hop = "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-01"
    headers = [JSON_TYPE, *BASE_HEADERS, (b"traceparent", hop.encode()), (b"tracestate", b"a=b")]
    event = decode_event(headers, b"1")
    assert isinstance(event, dict)
    assert "traceparent" not in event and "tracestate" not in event
    both = decode_event([*headers, (b"ce-traceparent", TRACEPARENT.encode())], b"1")
    assert isinstance(both, dict) and both["traceparent"] == TRACEPARENT


def test_an_empty_body_is_no_data() -> None:
    event = decode_event([JSON_TYPE, *BASE_HEADERS], b"")
    assert event == {**BASE, "datacontenttype": "application/json"}
    # Without data there may be no Content-Type at all (nothing to type): the SDKs do that.
    assert decode_event(BASE_HEADERS, b"") == BASE
    assert decode_event([*BASE_HEADERS, (b"content-length", b"0")], b"") == BASE


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"a%20b", "a b"),
        (b"%e2%82%ac", "€"),  # lower-case hex is accepted
        (b"%41%42c", "ABc"),  # so is needless encoding
        (b"%2541", "%41"),  # one round, no more
        (b"  spaced\t", "spaced"),  # optional whitespace around a header value
        (b'"a b"', "a b"),  # an older sender's quoted string
        (b'"say \\"hi\\" \\\\ ok"', 'say "hi" \\ ok'),
        (b'x"y z"w', "xy zw"),
        (b'"%20"', " "),  # unquoted first, then percent-decoded
        (b"caf\xc3\xa9", "café"),  # raw UTF-8 bytes are taken as the bytes they are
        (b"back\\slash", "back\\slash"),  # outside quotes a backslash is itself
    ],
)
def test_header_values_are_decoded_as_the_binding_says(raw: bytes, value: str) -> None:
    event = decode_event([JSON_TYPE, *BASE_HEADERS, (b"ce-subject", raw)], b"")
    assert isinstance(event, dict) and event["subject"] == value


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"%C0%A0", "not UTF-8"),  # an overlong space: the binding says reject it
        (b"%ED%A0%80", "not UTF-8"),  # a lone surrogate
        (b"%FF", "not UTF-8"),
        (b"\xff", "not UTF-8"),
        (b"50%", "'%' not followed"),
        (b"%4", "'%' not followed"),
        (b"%zz", "'%' not followed"),
        (b"%%41", "'%' not followed"),
        (b'"open', "unterminated quoted string"),
        (b'"ends with \\"', "unterminated quoted string"),
    ],
)
def test_a_header_value_that_cannot_be_decoded_is_refused(raw: bytes, said: str) -> None:
    refused = refusal([JSON_TYPE, *BASE_HEADERS, (b"ce-subject", raw)], b"")
    assert refused.field == "subject" and said in str(refused)
    assert str(refused).startswith("ce-subject: ")


def test_a_ce_header_given_twice_is_refused() -> None:
    headers = [JSON_TYPE, *BASE_HEADERS, (b"ce-id", b"order-1")]
    refused = refusal(headers, b"")
    assert refused.field == "id" and "ce-id: header given twice" in str(refused)


@pytest.mark.parametrize("name", ["datacontenttype", "data", "data_base64"])
def test_what_the_body_and_content_type_carry_is_not_a_header(name: str) -> None:
    headers = [JSON_TYPE, *BASE_HEADERS, (f"ce-{name}".encode(), b"application/json")]
    refused = refusal(headers, b"{}")
    assert refused.field == name and str(refused).startswith(f"ce-{name}: not a header")


@pytest.mark.parametrize(
    ("body", "said"),
    [(b"{", "not valid JSON"), (b'{"a": 1, "a": 2}', "appears twice"), (b"\xff", "not UTF-8")],
)
def test_binary_data_must_be_strict_json(body: bytes, said: str) -> None:
    refused = refusal([JSON_TYPE, *BASE_HEADERS], body)
    assert refused.field == "body" and said in str(refused)


def test_decoding_leaves_judging_to_the_envelope() -> None:
    # No specversion, a bad id, an extension name the envelope refuses: all come through.
    headers = [JSON_TYPE, (b"ce-id", b"-bad"), (b"ce-my-ext", b"x")]
    event = decode_event(headers, b"")
    assert event == {"id": "-bad", "my-ext": "x", "datacontenttype": "application/json"}
    with pytest.raises(InvalidEvent) as caught:
        validate_cloudevent(event)
    assert caught.value.field == "specversion"


CE_SAFE = "".join(c for c in string.printable if "!" <= c <= "~" and c not in ' "%')


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40))
def test_any_text_percent_encoded_as_the_binding_says_decodes_to_itself(text: str) -> None:
    encoded = quote(text, safe=CE_SAFE).encode("ascii")
    event = decode_event([JSON_TYPE, (b"ce-subject", encoded)], b"")
    assert isinstance(event, dict) and event["subject"] == text


# --- batch mode


def test_a_batch_is_the_bodys_list_each_item_as_it_is() -> None:
    items: list[Any] = [BASE, {**BASE, "id": "order-2", "data": [1, 2]}, 5, {}]
    for content_type in (BATCH_TYPE[1], BATCH_TYPE[1] + b"; charset=utf-8"):
        assert decode_batch([(b"content-type", content_type)], body_of(items)) == items
    assert decode_batch([BATCH_TYPE], b"[]") == []  # how many are allowed is the route's call


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (body_of(BASE), "must be a JSON list of events, got object"),
        (b"7", "got number"),
        (b"[{}, {}", "not valid JSON"),
        (b'[{"id": 1, "id": 2}]', "appears twice"),
    ],
)
def test_a_batch_body_that_is_not_one_json_list(body: bytes, said: str) -> None:
    refused = refusal([BATCH_TYPE], body, batch=True)
    assert refused.field == "body" and said in str(refused)


# --- interop: the CNCF SDK's requests, decoded and validated, are the same event


def sdk_event() -> CoreEvent:
    return CoreEvent(
        {
            "specversion": "1.0",
            "type": "com.example.order.placed",
            "source": "/orders",
            "id": "order-77",
            "subject": 'Euro € 😀 "quoted" 100%',
            "partitionkey": "customer 9",
            "traceparent": TRACEPARENT,
            "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            "region": "eu 1",
            # Binary mode always types its data (the Content-Type); said here too, the
            # structured form carries the same attribute.
            "datacontenttype": "application/json",
        },
        {"total": 5, "note": "在庫 ✓", "lines": [{"sku": "a", "price": 1.25}]},
    )


def test_the_core_sdks_binary_and_structured_requests_are_the_same_event() -> None:
    theirs = sdk_event()
    binary = to_binary_event(theirs)
    structured = to_structured_event(theirs)
    assert "ce-subject" in binary.headers  # really two modes
    from_binary = validate_cloudevent(decode_event(asgi(binary.headers), binary.body))
    from_structured = validate_cloudevent(decode_event(asgi(structured.headers), structured.body))
    assert from_binary == from_structured
    assert from_binary == validate_cloudevent(json.loads(JSONFormat().write(theirs)))
    assert from_binary["subject"] == 'Euro € 😀 "quoted" 100%'
    assert from_binary["traceparent"] == TRACEPARENT
    assert from_binary["data"]["note"] == "在庫 ✓"


def test_the_core_sdks_event_without_data_in_both_modes() -> None:
    theirs = CoreEvent(
        {"specversion": "1.0", "type": "com.example.ping", "source": "/p", "id": "p-1"}
    )
    binary = to_binary_event(theirs)
    structured = to_structured_event(theirs)
    assert "content-type" not in {name.lower() for name in binary.headers}
    from_binary = validate_cloudevent(decode_event(asgi(binary.headers), binary.body))
    from_structured = validate_cloudevent(decode_event(asgi(structured.headers), structured.body))
    assert from_binary == from_structured
    assert "data" not in from_binary and "datacontenttype" not in from_binary


def test_the_legacy_sdks_binary_and_structured_requests_are_the_same_event() -> None:
    # The legacy API (``cloudevents.http`` in SDK 1.x) does not percent-encode header values,
    # so its values here are plain ASCII tokens, as they would have to be on the wire.
    theirs = LegacyEvent(
        {
            "type": "warehouse.stock.added",
            "source": "/warehouse",
            "id": "order-1",
            "subject": "snack-7",
            "partitionkey": "snack-7",
            "datacontenttype": "application/json",
        },
        {"sku": "snack-7", "qty": 7},
    )
    with pytest.warns(DeprecationWarning):
        binary_headers, binary_body = legacy_to_binary(theirs)
    with pytest.warns(DeprecationWarning):
        structured_headers, structured_body = legacy_to_structured(theirs)
    from_binary = validate_cloudevent(decode_event(asgi(binary_headers), binary_body))
    from_structured = validate_cloudevent(decode_event(asgi(structured_headers), structured_body))
    assert from_binary == from_structured
    assert from_binary["data"] == {"sku": "snack-7", "qty": 7}
    assert from_binary["time"] == theirs["time"]


def test_a_batch_of_sdk_events_is_each_of_them() -> None:
    events = [
        sdk_event(),
        CoreEvent({"specversion": "1.0", "type": "t", "source": "/s", "id": "2"}),
    ]
    body = b"[" + b",".join(JSONFormat().write(event) for event in events) + b"]"
    decoded = decode_batch([BATCH_TYPE], body)
    assert [validate_cloudevent(item) for item in decoded] == [
        validate_cloudevent(json.loads(JSONFormat().write(event))) for event in events
    ]
