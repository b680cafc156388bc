"""The official CloudEvents conformance cases (``tests/fixtures/cloudevents``) against a real
``ackledger serve sink`` process: every event case in structured and in binary mode, every
HTTP-binding scenario as its raw request. Each is acknowledged, and what the handler got is
the event the case describes (``datacontenttype`` as sent, the data as the case gives it).
Then the edges of the widened envelope, valid and invalid, through the same process."""

from __future__ import annotations

import datetime
import http.client
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from ackledger.ops.processes import Service, start_service

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "cloudevents"

HANDLERS = """
import json


def keep(tx, event):
    tx.execute(
        "CREATE TABLE IF NOT EXISTS seen (source TEXT, id TEXT, event TEXT)"
    )
    tx.execute(
        "INSERT INTO seen (source, id, event) VALUES (?, ?, ?)",
        (event["source"], event["id"], json.dumps(event)),
    )


HANDLERS = {
    name: keep
    for name in (
        "io.cloudevents.minimum", "com.example.someevent", "com.example.any", "a/b c",
    )
}
"""


def _cases() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name in ("v1.yaml", "v1_minimum.yaml"):
        text = (FIXTURES / name).read_text(encoding="utf-8")
        for number, case in enumerate(yaml.safe_load_all(text)):
            found.append((f"{name}#{number}", case))
    return found


CASES = _cases()


def _text(value: object) -> str:
    """A YAML scalar as the conformance tool writes it: text, trimmed (YAML reads a time as a
    datetime and 1.0 as a number)."""
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    return str(value).strip()


def _attributes(case: dict[str, Any]) -> dict[str, str]:
    context = dict(case["ContextAttributes"])
    extensions = context.pop("Extensions", None) or {}
    return {name: _text(value) for name, value in {**context, **extensions}.items()}


def _is_json(declared: str | None) -> bool:
    media = (declared or "application/json").split(";")[0].strip()
    return media == "application/json" or media.endswith("+json")


def _structured(case: dict[str, Any]) -> tuple[dict[str, str], bytes, Any]:
    attributes = _attributes(case)
    data: Any = case.get("Data")
    event: dict[str, Any] = dict(attributes)
    if data is not None:
        data = json.loads(data) if _is_json(attributes.get("datacontenttype")) else data
        event["data"] = data
    headers = {"Content-Type": "application/cloudevents+json; charset=UTF-8"}
    return headers, json.dumps(event).encode(), data


def _binary(case: dict[str, Any]) -> tuple[dict[str, str], bytes, Any]:
    attributes = _attributes(case)
    declared = attributes.pop("datacontenttype", None)
    headers = {f"ce-{name}": quote(value, safe="/:+=@,;") for name, value in attributes.items()}
    if declared is not None:
        headers["Content-Type"] = declared
    data: Any = case.get("Data")
    if data is None:
        return headers, b"", None
    charset = re.search(r"charset=([\w-]+)", declared or "")
    body = data.encode(charset.group(1) if charset else "utf-8")
    return headers, body, json.loads(data) if _is_json(declared) else data


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    """A ``serve sink`` of its own, with a handler that keeps each event it gets."""
    (tmp_path / "keeping.py").write_text(HANDLERS, encoding="utf-8")
    db = tmp_path / "sink.db"
    service = start_service(
        ["serve", "sink", "--db", str(db), "--port", "0", "--handlers", "keeping:HANDLERS"],
        env={"PYTHONPATH": str(tmp_path)},
        stderr_path=tmp_path / "sink.log",
    )
    try:
        yield service, db
    finally:
        service.stop()


def post(service: Service, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        conn.request("POST", path, body, headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def seen(db: Path, event_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        [(text,)] = conn.execute("SELECT event FROM seen WHERE id = ?", (event_id,)).fetchall()
    finally:
        conn.close()
    found: dict[str, Any] = json.loads(text)
    return found


@pytest.mark.parametrize(("name", "case"), CASES, ids=[name for name, _ in CASES])
def test_each_event_case_is_applied_in_both_modes_as_the_same_event(
    sink: tuple[Service, Path], name: str, case: dict[str, Any]
) -> None:
    service, db = sink
    statuses = []
    for encode in (
        (_structured, _binary) if case.get("Mode") != "binary" else (_binary, _structured)
    ):
        headers, body, data = encode(case)
        status, answer = post(service, "/events", headers, body)
        assert status == 200, (encode.__name__, answer)
        statuses.append(answer["status"])
        event = seen(db, answer["id"])
        attributes = _attributes(case)
        for attribute, value in attributes.items():
            assert event[attribute] == value, attribute  # datacontenttype as sent
        assert event.get("data") == data
    # The second mode carried the same event: a duplicate, not a conflict.
    assert statuses == ["applied", "duplicate"]


def _scenarios() -> list[tuple[str, str, dict[str, str], Any]]:
    """Each HTTP-binding scenario's raw request per example, with the attributes and the
    data a receiver must read from it."""
    text = (FIXTURES / "http-protocol-binding.feature").read_text(encoding="utf-8")
    found = []
    for block in text.split("Scenario Outline:")[1:]:
        request, data = re.findall(r'"""\n(.*?)\n\s*"""', block, re.S)
        table = re.search(r"Then the attributes are:\n(.*?)\n\s*And", block, re.S)
        assert table is not None
        rows = [line.strip().strip("|").split("|") for line in table.group(1).splitlines()[1:]]
        expected = {key.strip(): value.strip() for key, value in rows}
        examples = block.split("Examples:")[1].strip().splitlines()[2:]
        for example in examples:
            content_type = example.strip().strip("|").strip()
            raw = re.sub(r"^ {8}", "", request, flags=re.M).replace("<contentType>", content_type)
            shown = {k: v.replace("<contentType>", content_type) for k, v in expected.items()}
            found.append((f"{block.split(chr(10))[0].strip()}", raw, shown, json.loads(data)))
    return found


SCENARIOS = _scenarios()


@pytest.mark.parametrize(
    ("name", "raw", "attributes", "data"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_each_http_binding_scenario_is_read_as_the_feature_says(
    sink: tuple[Service, Path], name: str, raw: str, attributes: dict[str, str], data: Any
) -> None:
    service, db = sink
    head, _, body = raw.partition("\n\n")
    lines = head.splitlines()
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers.pop("Content-Length")
    headers.pop("Host")
    status, answer = post(service, "/events", headers, body.encode())
    assert status == 200, answer
    event = seen(db, attributes["id"])
    assert {name: event[name] for name in attributes} == attributes
    assert event["data"] == data


BASE = {"specversion": "1.0", "source": "/edges", "type": "com.example.any"}


@pytest.mark.parametrize(
    "extra",
    [
        {"id": "a/b"},
        {"id": "with space"},
        {"id": "plus+and=equals"},
        {"id": "ünïcode 在庫"},
        {"id": "t", "type": "a/b c"},
        {"id": "long-ext", "averyveryverylongextensionname": "x"},
        {"id": "charset", "datacontenttype": "application/json; charset=utf-8", "data": [1]},
        {"id": "plus-json", "datacontenttype": "application/vnd.x+json", "data": {"a": 1}},
        {"id": "text", "datacontenttype": "text/plain", "data": "hello"},
        {"id": "xml", "datacontenttype": "application/xml", "data": "<a/>"},
        {"id": "b64", "datacontenttype": "application/octet-stream", "data_base64": "AP8="},
        {"id": "schema", "dataschema": "https://example.com/schema.json"},
        {"id": "int32", "ext": 2147483647},
    ],
    ids=lambda extra: extra["id"],
)
def test_what_the_widened_envelope_accepts_is_applied_in_both_modes(
    sink: tuple[Service, Path], extra: dict[str, Any]
) -> None:
    service, db = sink
    event = {**BASE, **extra}
    structured = {"Content-Type": "application/cloudevents+json"}
    status, answer = post(service, "/events", structured, json.dumps(event).encode())
    assert (status, answer["id"], answer["status"]) == (200, event["id"], "applied"), answer
    assert seen(db, event["id"]) == event
    headers = {
        f"ce-{name}": quote(str(value), safe="/")
        for name, value in event.items()
        if name not in ("data", "data_base64", "datacontenttype")
    }
    body = b""
    if "datacontenttype" in event:
        headers["Content-Type"] = event["datacontenttype"]
    if "data_base64" in event:
        body = b"\x00\xff"
    elif "data" in event:
        data = event["data"]
        body = (json.dumps(data) if not isinstance(data, str) else data).encode()
    status, answer = post(service, "/events", headers, body)
    if "ext" in event:
        # A header carries text: the integer comes back as a string, other content.
        assert status == 422, answer
    else:
        assert (status, answer["status"]) == (200, "duplicate"), answer


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"dataschema": ""}, "dataschema"),
        ({"dataschema": "/relative/schema.json"}, "dataschema"),
        ({"ext": 1.5}, "ext"),
        ({"ext": 2147483648}, "ext"),
        ({"ext": "a\u0001b"}, "ext"),
        ({"id": "line\nbreak"}, "id"),
        ({"datacontenttype": "text/plain", "data": {"a": 1}}, "data"),
        ({"data_base64": "not base64!"}, "data_base64"),
    ],
)
def test_what_it_refuses_is_400_naming_the_attribute(
    sink: tuple[Service, Path], extra: dict[str, Any], field: str
) -> None:
    service, _ = sink
    event = {**BASE, "id": "refused", **extra}
    headers = {"Content-Type": "application/cloudevents+json"}
    status, answer = post(service, "/events", headers, json.dumps(event).encode())
    assert (status, answer["field"]) == (400, field), answer
