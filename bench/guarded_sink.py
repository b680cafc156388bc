"""The guarded hand-over's sink: the least Python can do to answer ``POST /events`` as the
CONTRACT requires (sections 1, 6 and 9), for the lab's ``warehouse.stock.added`` event.

A sibling of ``rawserver.py``: one blocking socket, one connection at a time, bare ``sqlite3``,
no ackledger code (``python -m bench.guarded_sink --db DB [--parser bytes|llhttp]`` prints its
URL; it imports the standard library and ``rawserver``'s listener, nothing else). Unlike the
raw server it keeps every rule a sink must keep for this event, each in the most direct form
found:

- the request: method ``POST``, path ``/events``, HTTP/1.1, ``Host`` a loopback name (421),
  ``Host``/``Content-Type``/``Content-Length`` given once, structured mode's content type, no
  ``Transfer-Encoding``, a body of at most 64 KiB (413);
- the event, parsed as untrusted UTF-8 JSON: specversion ``"1.0"``, id and type of their
  patterns, source an RFC 3986 URI-reference (matched once per source, as ackledger caches
  it), subject and partitionkey printable, ``datacontenttype`` only ``application/json``,
  ``data`` exactly ``{"sku", "qty"}`` under the lab's rules; any other attribute is refused
  (400): the floor serves this workload's shape, and refusing is never the cheaper way;
- the fingerprint: SHA-256 of the content's canonical JSON (sorted keys, no white space), the
  text written in sorted order directly, as ackledger's fast path writes it;
- one FULL transaction for a new event: the receipt claimed (``INSERT ... ON CONFLICT DO
  NOTHING``, keyed by ``(id, source)``), the effect (inventory += qty), the applied counter;
- a duplicate: a read by key that finds the same fingerprint, then its receipt count and the
  duplicate counter committed without an fsync (a second connection with synchronous=NORMAL,
  as ackledger's ``write(durable=False)``); other content: 422 and the conflict counter;
- the answer: 200 with ``{"ack":true,"id","source","status"}`` (a duplicate also
  ``Idempotent-Replayed: true``), framed by Content-Length.

The canonical text of this shape cannot pass 64 KiB (its fields are capped far below), so the
size rule is kept by the body's cap.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from json.encoder import encode_basestring

from .rawserver import listen

MAX_BODY = 64 * 1024
MAX_HEAD = 16 * 1024
MAX_QTY = 1_000_000
TYPE = "warehouse.stock.added"
#: ackledger's page size (store/sqlite/backend.py): the pages per commit stay comparable.
PAGE_SIZE = 2048

#: The tables a sink needs, in ackledger's shape (written out, so the floor is the same for
#: every checkout ``bench.compare`` measures).
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ackledger_inbox (source TEXT NOT NULL, id TEXT NOT NULL, "
    "type TEXT NOT NULL, fingerprint TEXT NOT NULL, first_received_at REAL NOT NULL, "
    "last_received_at REAL NOT NULL, receipts INTEGER NOT NULL DEFAULT 1, arrival INTEGER, "
    "last_arrival INTEGER, PRIMARY KEY (id, source)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ackledger_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
_FIND = "SELECT fingerprint FROM ackledger_inbox WHERE id = ? AND source = ?"
_CLAIM = (
    "INSERT INTO ackledger_inbox (source, id, type, fingerprint, first_received_at, "
    "last_received_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id, source) DO NOTHING"
)
_ADD = (
    "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
    "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty"
)
_COUNT = (
    "INSERT INTO ackledger_counters (name, value) VALUES (?, 1) "
    "ON CONFLICT (name) DO UPDATE SET value = ackledger_counters.value + 1"
)
_NOTE = (
    "UPDATE ackledger_inbox SET receipts = receipts + 1, last_received_at = ? "
    "WHERE id = ? AND source = ?"
)

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_TYPE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SKU = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
# RFC 3986's URI-reference (ackledger's envelope/uri_reference.py without IP literals: a source
# with brackets is refused, which is stricter, never cheaper: sources are matched once).
_U, _S, _P = r"A-Za-z0-9\-._~", r"!$&'()*+,;=", r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_U}{_S}:@]|{_P})"
_AUTH = rf"(?:(?:[{_U}{_S}:]|{_P})*@)?(?:[{_U}{_S}]|{_P})*(?::[0-9]*)?"
_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_ABSOLUTE = rf"/(?:{_PCHAR}+{_ABEMPTY})?"
_TAIL = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI_REFERENCE = re.compile(
    rf"(?:[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTH}{_ABEMPTY}|{_ABSOLUTE}|{_PCHAR}+{_ABEMPTY}|)"
    rf"|//{_AUTH}{_ABEMPTY}|{_ABSOLUTE}|(?:[{_U}{_S}@]|{_P})+{_ABEMPTY}|){_TAIL}"
)
_SOURCES: set[str] = set()
#: The attributes this floor takes; the first four are required.
_KNOWN = frozenset(
    {"specversion", "id", "source", "type", "subject", "partitionkey", "datacontenttype", "data"}
)
_STRUCTURED = frozenset(
    {b"application/cloudevents+json", b"application/cloudevents+json; charset=utf-8"}
)
_LOOPBACK = frozenset({b"127.0.0.1", b"localhost", b"[::1]"})


class Refused(Exception):
    """The request is answered with ``status`` and a one-line reason, and nothing changes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def loopback_host(value: bytes) -> bool:
    """Is a ``Host`` value a loopback name or address, with any port (CONTRACT section 9)?"""
    if value in _LOOPBACK:
        return True
    name, colon, port = value.rpartition(b":")
    return bool(colon) and port.isdigit() and name in _LOOPBACK


def _printable(value: object) -> str:
    if type(value) is not str or not 1 <= len(value) <= 256:
        raise Refused(400, "subject/partitionkey: 1-256 printable characters")
    # ackledger's fast path: printable ASCII passes at once; anything else is refused here
    # (stricter than the full rules, and a floor may refuse more, never less).
    if not (value.isascii() and value.isprintable()):
        raise Refused(400, "subject/partitionkey: printable ASCII only in this floor")
    return value


#: A valid lab event: (id, source, fingerprint, sku, qty).
Checked = tuple[str, str, str, str, int]


def checked(body: bytes) -> Checked:
    """(id, source, fingerprint, sku, qty) of a valid lab event, else Refused(400 or 422)."""
    try:
        event = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Refused(400, "body: not UTF-8 JSON") from None
    if type(event) is not dict or not event.keys() <= _KNOWN:
        raise Refused(400, "body: not a lab event's attributes")
    specversion, event_id = event.get("specversion"), event.get("id")
    source, kind, data = event.get("source"), event.get("type"), event.get("data")
    if specversion != "1.0" or type(specversion) is not str:
        raise Refused(400, "specversion")
    if type(event_id) is not str or not _ID.fullmatch(event_id):
        raise Refused(400, "id")
    if type(kind) is not str or not _TYPE.fullmatch(kind):
        raise Refused(400, "type")
    if type(source) is not str or source not in _SOURCES:
        if type(source) is not str or not 1 <= len(source) <= 256:
            raise Refused(400, "source")
        if not _URI_REFERENCE.fullmatch(source):
            raise Refused(400, "source")
        _SOURCES.add(source)
    if "datacontenttype" in event and event["datacontenttype"] != "application/json":
        raise Refused(400, "datacontenttype")
    if kind != TYPE:
        raise Refused(422, "no handler for this type")
    if type(data) is not dict or len(data) != 2:
        raise Refused(400, "data")
    sku, qty = data.get("sku"), data.get("qty")
    if type(sku) is not str or not _SKU.fullmatch(sku):
        raise Refused(400, "data.sku")
    if type(qty) is not int or not 1 <= qty <= MAX_QTY:
        raise Refused(400, "data.qty")
    key = subject = ""
    if "partitionkey" in event:
        key = '"partitionkey":' + encode_basestring(_printable(event["partitionkey"])) + ","
    if "subject" in event:
        subject = '"subject":' + encode_basestring(_printable(event["subject"])) + ","
    # The content (all but datacontenttype, time and the trace attributes, which this shape
    # does not take) in sorted key order; id, type and sku are of alphabets JSON never escapes,
    # and a source of RFC 3986's.
    content = (
        f'{{"data":{{"qty":{qty},"sku":"{sku}"}},"id":"{event_id}",{key}"source":"{source}",'
        f'"specversion":"1.0",{subject}"type":"{kind}"}}'
    )
    return event_id, source, hashlib.sha256(content.encode()).hexdigest(), sku, qty


class Inbox:
    """The receipts, the effect and the counters, on two connections to one WAL file: FULL
    for what must be durable, NORMAL for a duplicate's bookkeeping."""

    def __init__(self, path: str) -> None:
        self.full = sqlite3.connect(path, isolation_level=None)
        self.full.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        self.full.execute("PRAGMA journal_mode = WAL")
        self.full.execute("PRAGMA synchronous = FULL")
        for statement in SCHEMA:
            self.full.execute(statement)
        self.relaxed = sqlite3.connect(path, isolation_level=None)
        self.relaxed.execute("PRAGMA synchronous = NORMAL")

    def receive(self, event_id: str, source: str, fingerprint: str, sku: str, qty: int) -> str:
        """ "applied" or "duplicate"; Refused(422) for other content under this identity."""
        full = self.full
        found = full.execute(_FIND, (event_id, source)).fetchone()
        now = time.time()
        if found is None:
            full.execute("BEGIN IMMEDIATE")
            if self.apply_new((event_id, source, fingerprint, sku, qty), now):
                full.execute("COMMIT")
                return "applied"
            # Claimed by another writer since the read: decide on what is stored now.
            found = full.execute(_FIND, (event_id, source)).fetchone()
            full.execute("ROLLBACK")
        return self.seen(event_id, source, fingerprint, found[0], now)

    def find(self, event_id: str, source: str) -> str | None:
        """The stored fingerprint of this identity, None: not received yet."""
        found = self.full.execute(_FIND, (event_id, source)).fetchone()
        return None if found is None else str(found[0])

    def apply_new(self, event: Checked, now: float) -> bool:
        """In the FULL connection's open transaction: claim the receipt and, if it was not
        claimed already, the effect and the applied counter. False: claimed already."""
        event_id, source, fingerprint, sku, qty = event
        full = self.full
        if full.execute(_CLAIM, (source, event_id, TYPE, fingerprint, now, now)).rowcount:
            full.execute(_ADD, (sku, qty))
            full.execute(_COUNT, ("sink.applied",))
            return True
        return False

    def seen(self, event_id: str, source: str, fingerprint: str, stored: str, now: float) -> str:
        """An identity received before (its ``stored`` fingerprint): "duplicate", counted
        without an fsync, or Refused(422) for other content, counted durably."""
        if stored == fingerprint:
            relaxed = self.relaxed
            relaxed.execute("BEGIN IMMEDIATE")
            relaxed.execute(_NOTE, (now, event_id, source))
            relaxed.execute(_COUNT, ("sink.duplicate",))
            relaxed.execute("COMMIT")
            return "duplicate"
        full = self.full
        full.execute("BEGIN IMMEDIATE")
        full.execute(_COUNT, ("sink.conflict",))
        full.execute("COMMIT")
        raise Refused(422, "conflict: this identity was applied with other content")


def answer(status: int, body: bytes, replayed: bool = False) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
              413: b"Content Too Large", 421: b"Misdirected Request",
              422: b"Unprocessable Content", 431: b"Request Header Fields Too Large",
              503: b"Service Unavailable"}.get(status, b"Error")  # fmt: skip
    kind = b"application/json" if status == 200 else b"application/problem+json"
    extra = b"idempotent-replayed: true\r\n" if replayed else b""
    return b"HTTP/1.1 %d %s\r\n%scontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status, reason, extra, kind, len(body), body,
    )  # fmt: skip


def refusal(problem: Refused) -> bytes:
    detail = {"status": problem.status, "detail": str(problem)}
    return answer(problem.status, json.dumps(detail).encode())


#: Parses a request head (the bytes before the blank line): returns the body's length, or
#: raises Refused.
HeadParser = Callable[[bytes], int]


def request_fields(target: bytes, fields: list[tuple[bytes, bytes]]) -> int:
    """The rules of the request line's target and the header fields (lower-case names)."""
    if target != b"/events":
        raise Refused(404, "path: only /events")
    host = content_type = length = None
    for name, value in fields:
        if name == b"content-length":
            if length is not None:
                raise Refused(400, "content-length: given twice")
            length = value
        elif name == b"content-type":
            if content_type is not None:
                raise Refused(400, "content-type: given twice")
            content_type = value
        elif name == b"host":
            if host is not None:
                raise Refused(400, "host: given twice")
            host = value
        elif name == b"transfer-encoding":
            raise Refused(400, "transfer-encoding: not taken; send Content-Length")
    if host is None or not loopback_host(host):
        raise Refused(421, "host: not a loopback name")
    if content_type not in _STRUCTURED:
        raise Refused(400, "content-type: application/cloudevents+json only")
    if length is None or not length.isdigit() or len(length) > 12:
        raise Refused(400, "content-length: missing or malformed")
    size = int(length)
    if size > MAX_BODY:
        raise Refused(413, "body over 64 KiB")
    return size


def bytes_head(head: bytes) -> int:
    """The head parsed with plain bytes operations."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] != b"HTTP/1.1":
        raise Refused(400, "request line: METHOD TARGET HTTP/1.1")
    if parts[0] != b"POST":
        raise Refused(405, "method: only POST")
    fields = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        # No white space before the colon (RFC 9112 5.1): it is how requests are smuggled.
        if not colon or not name or name != name.strip():
            raise Refused(400, "malformed header line")
        fields.append((name.lower(), value.strip(b" \t")))
    return request_fields(parts[1], fields)


class _Llhttp:
    """The head parsed by llhttp (``httptools``, the parser ``serve sink`` runs)."""

    def __init__(self) -> None:
        import httptools

        self.error = httptools.HttpParserError
        self.parser = httptools.HttpRequestParser(self)
        self.fields: list[tuple[bytes, bytes]] = []
        self.target = b""

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value))

    def __call__(self, head: bytes) -> int:
        self.fields.clear()
        self.target = b""
        try:
            self.parser.feed_data(head + b"\r\n\r\n")
        except self.error:
            raise Refused(400, "malformed request head") from None
        if self.parser.get_http_version() != "1.1":
            raise Refused(400, "request line: HTTP/1.1 only")
        if self.parser.get_method() != b"POST":
            raise Refused(405, "method: only POST")
        size = request_fields(self.target, self.fields)
        # The parser now waits for the body; a fresh one per request costs less than feeding
        # it bytes it does not need.
        self.parser = type(self.parser)(self)
        return size


def acked(event_id: str, source: str, status: str) -> bytes:
    """The 200 answer of an event taken (``status``: "applied" or "duplicate")."""
    ack = b'{"ack":true,"id":"%s","source":"%s","status":"%s"}' % (
        event_id.encode(), source.encode(), status.encode(),
    )  # fmt: skip
    return answer(200, ack, status == "duplicate")


def respond(body: bytes, inbox: Inbox) -> bytes:
    """The answer to one request's body (its head has passed)."""
    try:
        event_id, source, fingerprint, sku, qty = checked(body)
        status = inbox.receive(event_id, source, fingerprint, sku, qty)
    except Refused as problem:
        return refusal(problem)
    return acked(event_id, source, status)


def serve_connection(conn: socket.socket, inbox: Inbox, parse: HeadParser) -> None:
    buffer = b""
    while True:
        head_end = buffer.find(b"\r\n\r\n")
        while head_end < 0:
            if len(buffer) > MAX_HEAD:
                conn.sendall(refusal(Refused(400, "head over 16 KiB")))
                return
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
            head_end = buffer.find(b"\r\n\r\n")
        try:
            size = parse(buffer[:head_end])
        except Refused as problem:
            # The framing is not trusted: answer, then end the connection.
            conn.sendall(refusal(problem))
            return
        end = head_end + 4 + size
        while len(buffer) < end:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
        body, buffer = buffer[head_end + 4 : end], buffer[end:]
        conn.sendall(respond(body, inbox))


def main(argv: list[str]) -> None:
    inbox = Inbox(argv[argv.index("--db") + 1])
    which = argv[argv.index("--parser") + 1] if "--parser" in argv else "bytes"
    parse: HeadParser = bytes_head if which == "bytes" else _Llhttp()
    # --once: exit when the first connection ends (bench.guarded_instructions counts a life).
    listen(lambda conn: serve_connection(conn, inbox, parse), once="--once" in argv)


if __name__ == "__main__":
    main(sys.argv)
