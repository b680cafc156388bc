"""``_core.json_text.loads``: the scanner's short way gives what ``json.loads`` gives, value
or error, for text that is not exactly one compact value too (the relay's selection parses the
outbox's stored text with it, and its HTTP sender every answer)."""

from __future__ import annotations

import json

import pytest

from ackledger._core.json_text import loads

TEXTS: list[str | bytes] = [
    '{"id":"e-1","data":{"qty":3,"sku":"pen"}}',
    '{"acks":[{"ack":true,"id":"e-1","source":"/s"}]}',
    '{"a": [1, 2.5, -0.0, null, false, "\\u00e9\\ud83d\\ude00"]}',
    " {} ",
    "{}\n",
    '{"a":1} {"a":2}',
    '{"a":1}x',
    '{"a":1',
    '{"a":"\x01"}',
    "",
    "[1]",
    "7",
    "NaN",
    b'{"acks":[]}',
    b'{"acks":[]}\r\n',
    '{"caf\u00e9":"\u4e2d"}'.encode(),
    '{"a":"\u00e9"}'.encode("utf-16"),
    b'\xef\xbb\xbf{"a":1}',
    b'{"a":"\xff"}',
    b"",
]


@pytest.mark.parametrize("text", TEXTS)
def test_loads_gives_what_json_loads_gives(text: str | bytes) -> None:
    try:
        expected = json.loads(text)
    except ValueError as refused:
        with pytest.raises(type(refused)) as raised:
            loads(text)
        assert str(raised.value) == str(refused)
    else:
        found = loads(text)
        # Dumped to compare: NaN is not equal to itself, and -0.0 equals 0.0.
        assert type(found) is type(expected) and json.dumps(found) == json.dumps(expected)


def test_each_parse_is_fresh() -> None:
    text = '{"data":{"lines":[{"qty":1}]}}'
    first, second = loads(text), loads(text)
    first["data"]["lines"][0]["qty"] = 99
    assert second["data"]["lines"][0]["qty"] == 1
