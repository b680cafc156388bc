"""The guarded hand-over floor keeps the rules it claims to keep (bench/CHANGES.md item 82):
a floor that silently did less work would make ackledger look slower than it is.

Real processes and files: the guarded sink (``bench/guarded_sink.py``) and the guarded loop
sink (``bench/guarded_loop_sink.py``, item 101: the same rules with the service's duties) on
127.0.0.1 with their own SQLite files, read back from a separate connection; the relay side on
a real outbox file.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from bench.guarded_relay import SOURCE, GuardedRelay, NotAcked, Wire, fill_outbox, lab_text
from bench.handovers import guarded_sink

from ackledger._dev.procs import start_listener
from ackledger.envelope import content_fingerprint


@pytest.fixture(params=["guarded_sink", "guarded_loop_sink"])
def sink(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[int, Path]]:
    """(a guarded sink's port, its database file): each rule is held by both sinks."""
    module = request.param
    with guarded_sink(tmp_path, module) as (url, _):
        name = "guarded-sink.db" if module == "guarded_sink" else f"{module}.db"
        yield int(url.rsplit(":", 1)[1]), tmp_path / name


def lab(event_id: str = "e-1", qty: int = 3, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(lab_text(event_id, 2))
    event["data"]["qty"] = qty
    event.update(changes)
    return {name: value for name, value in event.items() if value is not None}


def post(
    port: int,
    body: bytes | dict[str, Any],
    *,
    method: str = "POST",
    path: str = "/events",
    host: str | None = None,
    content_type: str = "application/cloudevents+json",
    extra: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request on a connection of its own: (status, lower-case headers, JSON body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"127.0.0.1:{port}")
        conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            conn.putheader(name, value)
        conn.endheaders(data)
        answer = conn.getresponse()
        headers = {name.lower(): value for name, value in answer.getheaders()}
        return answer.status, headers, json.loads(answer.read())
    finally:
        conn.close()


def stored(db: Path) -> dict[str, Any]:
    """What the sink's database holds, read by a connection of this process."""
    conn = sqlite3.connect(db)
    try:
        return {
            "inventory": dict(conn.execute("SELECT sku, qty FROM inventory").fetchall()),
            "counters": dict(conn.execute("SELECT name, value FROM ackledger_counters").fetchall()),
            "receipts": {
                (source, event_id): (fingerprint, receipts)
                for source, event_id, fingerprint, receipts in conn.execute(
                    "SELECT source, id, fingerprint, receipts FROM ackledger_inbox"
                )
            },
        }
    finally:
        conn.close()


def test_a_new_event_is_applied_once_and_a_resend_is_a_duplicate(sink: tuple[int, Path]) -> None:
    port, db = sink
    event = lab()
    status, headers, ack = post(port, event)
    assert (status, ack) == (
        200,
        {"ack": True, "id": "e-1", "source": SOURCE, "status": "applied"},
    )
    assert "idempotent-replayed" not in headers
    status, headers, ack = post(port, event)
    assert (status, ack["status"], headers["idempotent-replayed"]) == (200, "duplicate", "true")
    after = stored(db)
    assert after["inventory"] == {"sku-2": 3}
    assert after["counters"] == {"sink.applied": 1, "sink.duplicate": 1}
    # The fingerprint is ackledger's, over the same content.
    assert after["receipts"] == {(SOURCE, "e-1"): (content_fingerprint(event), 2)}


def test_other_content_under_an_applied_identity_is_refused(sink: tuple[int, Path]) -> None:
    port, db = sink
    post(port, lab(qty=3))
    before = stored(db)
    for changed in (lab(qty=4), lab(subject='sku "2"'), lab(partitionkey=None)):
        status, _, problem = post(port, changed)
        assert (status, problem["status"]) == (422, 422), changed
    after = stored(db)
    assert after["inventory"] == before["inventory"] == {"sku-2": 3}
    assert after["receipts"] == before["receipts"]
    assert after["counters"]["sink.conflict"] == 3


def test_a_quoted_subject_is_fingerprinted_as_ackledger_does(sink: tuple[int, Path]) -> None:
    port, db = sink
    event = lab("e-q", subject='a "quoted" \\ subject')
    assert post(port, event)[0] == 200
    assert stored(db)["receipts"][(SOURCE, "e-q")][0] == content_fingerprint(event)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (lab(specversion="0.3"), 400),
        (lab(id="-starts-with-a-dash"), 400),
        (lab(source="not a uri"), 400),
        (lab(type="com.example.other"), 422),  # no handler for it
        (lab(qty=True), 400),  # a bool is not a number
        (lab(qty=0), 400),
        (lab(qty=1_000_001), 400),
        (lab(data={"sku": "sku-2", "qty": 1, "note": "x"}), 400),
        (lab(data={"sku": "bad sku", "qty": 1}), 400),
        (lab(datacontenttype="text/plain"), 400),
        (lab(subject=""), 400),
        (lab(extension=1), 400),
        (b"[1, 2]", 400),
        (b"{not json", 400),
        (b'{"id": "\xff"}', 400),
    ],
)
def test_an_invalid_event_is_refused_and_nothing_changes(
    sink: tuple[int, Path], body: bytes | dict[str, Any], status: int
) -> None:
    port, db = sink
    assert post(port, body)[0] == status
    assert stored(db) == {"inventory": {}, "counters": {}, "receipts": {}}


@pytest.mark.parametrize(
    ("options", "status"),
    [
        ({"path": "/other"}, 404),
        ({"method": "PUT"}, 405),
        ({"host": "evil.example:80"}, 421),
        ({"content_type": "application/json"}, 400),
        ({"extra": {"Transfer-Encoding": "chunked"}}, 400),
        ({"extra": {"Content-Type": "application/cloudevents+json"}}, 400),  # given twice
    ],
)
def test_a_request_outside_the_rules_is_refused(
    sink: tuple[int, Path], options: dict[str, Any], status: int
) -> None:
    port, db = sink
    assert post(port, lab(), **options)[0] == status
    assert stored(db)["receipts"] == {}


def test_a_body_over_64_kib_is_refused(sink: tuple[int, Path]) -> None:
    port, db = sink
    assert post(port, b"{" + b" " * (64 * 1024) + b"}")[0] == 413
    assert stored(db)["receipts"] == {}


@pytest.mark.parametrize("behind", [False, True])
def test_the_guarded_relay_sends_in_order_and_marks_each_once(
    sink: tuple[int, Path], tmp_path: Path, behind: bool
) -> None:
    port, db = sink
    outbox = tmp_path / "outbox.db"
    fill_outbox(outbox, "r", 40)
    conn = sqlite3.connect(outbox, isolation_level=None)
    # A quarantined event is never selected, and its hold is kept.
    conn.execute("UPDATE ackledger_outbox SET quarantined = 1 WHERE id = 'r-5'")
    relay = GuardedRelay(outbox, f"http://127.0.0.1:{port}", behind=behind)
    try:
        for _ in range(39):
            relay.step()
        with pytest.raises(RuntimeError, match="ran out"):
            relay.step()
    finally:
        relay.close()
    rows = conn.execute("SELECT id, sent, attempts FROM ackledger_outbox ORDER BY seq").fetchall()
    assert rows == [(f"r-{n}", int(n != 5), int(n != 5)) for n in range(40)]
    after = stored(db)
    assert len(after["receipts"]) == 39
    assert after["counters"] == {"sink.applied": 39}


def test_the_relay_takes_only_the_exact_ack_of_its_event() -> None:
    # The zero-code raw server answers every request with {"ack": true, "id": "floor"}.
    rawserver = Path(__file__).parent.parent / "bench" / "rawserver.py"
    with start_listener([sys.executable, str(rawserver)]) as raw:
        wire = Wire("127.0.0.1", int(raw.base_url.rsplit(":", 1)[1]))
        try:
            with pytest.raises(NotAcked, match="another event"):
                wire.send("e-1", SOURCE, lab_text("e-1", 1))
            with pytest.raises(NotAcked, match="another event"):  # the id, but no source
                wire.send("floor", SOURCE, lab_text("floor", 1))
        finally:
            wire.close()


# The guarded loop sink's service duties (bench/guarded_loop_sink.py, item 101): the limits,
# many clients at once, pipelining, group commit. Its limits are shortened for the test.


class Loop(NamedTuple):
    port: int
    pid: int
    db: Path


@pytest.fixture
def loop_sink(tmp_path: Path) -> Iterator[Loop]:
    options = ("--read-timeout", "0.5", "--max-connections", "3")
    with guarded_sink(tmp_path, "guarded_loop_sink", *options) as (url, pid):
        yield Loop(int(url.rsplit(":", 1)[1]), pid, tmp_path / "guarded_loop_sink.db")


def request(event_id: str, port: int, qty: int = 1) -> bytes:
    body = json.dumps(lab(event_id, qty)).encode()
    return (
        b"POST /events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/cloudevents+json\r\nContent-Length: %d\r\n\r\n%s"
    ) % (port, len(body), body)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def read_answers(conn: socket.socket, count: int) -> list[tuple[bytes, dict[str, Any]]]:
    """``count`` answers framed by Content-Length: (status line and headers, JSON body)."""
    buffer, found = b"", list[tuple[bytes, dict[str, Any]]]()
    while len(found) < count:
        head_end = buffer.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buffer[:head_end].lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            end = head_end + 4 + length
            if len(buffer) >= end:
                found.append((head, json.loads(buffer[head_end + 4 : end])))
                buffer = buffer[end:]
                continue
        chunk = conn.recv(65536)
        assert chunk, "closed before all answers came"
        buffer += chunk
    return found


def closed(conn: socket.socket) -> bool:
    """Does the server end this connection (within the socket's time-out)?"""
    try:
        while conn.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def commits(db: Path) -> int:
    """The commits in the WAL file: its frames of this WAL generation that end a transaction."""
    wal = (db.parent / (db.name + "-wal")).read_bytes()
    page_size = int.from_bytes(wal[8:12], "big")
    salts, count = wal[16:24], 0
    for start in range(32, len(wal) - 24, 24 + page_size):
        frame = wal[start : start + 24]
        if frame[8:16] == salts and int.from_bytes(frame[4:8], "big"):
            count += 1
    return count


def test_a_head_past_the_cap_is_answered_431_and_closed(loop_sink: Loop) -> None:
    conn = connect(loop_sink.port)
    with conn:
        conn.sendall(b"POST /events HTTP/1.1\r\nX-Long: " + b"a" * (64 * 1024 + 100))
        head, problem = read_answers(conn, 1)[0]
        assert head.startswith(b"http/1.1 431 ")
        assert problem["status"] == 431
        assert closed(conn)


def test_a_slow_head_and_a_slow_body_are_closed_after_the_read_timeout(loop_sink: Loop) -> None:
    for partial in (
        b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        request("e-slow", loop_sink.port)[:-10],  # all but the body's last bytes
    ):
        conn = connect(loop_sink.port)
        with conn:
            conn.sendall(partial)
            assert closed(conn), partial
    assert stored(loop_sink.db)["receipts"] == {}


def test_an_idle_connection_does_not_hold_up_another(loop_sink: Loop) -> None:
    idle, busy = connect(loop_sink.port), connect(loop_sink.port)
    with idle, busy:
        idle.sendall(b"POST /events HTTP/1.1\r\n")  # a head begun, not finished
        busy.sendall(request("e-busy", loop_sink.port))
        ((_, ack),) = read_answers(busy, 1)
        assert ack["status"] == "applied"


def test_connections_past_the_cap_are_answered_503(loop_sink: Loop) -> None:
    kept = [connect(loop_sink.port) for _ in range(3)]
    try:
        with connect(loop_sink.port) as extra:
            head, _ = read_answers(extra, 1)[0]
            assert head.startswith(b"http/1.1 503 ")
            assert closed(extra)
        kept[0].sendall(request("e-kept", loop_sink.port))
        assert read_answers(kept[0], 1)[0][1]["status"] == "applied"
    finally:
        for conn in kept:
            conn.close()


def test_pipelined_requests_are_answered_in_order(loop_sink: Loop) -> None:
    port = loop_sink.port
    with connect(port) as conn:
        conn.sendall(request("e-1", port) + request("e-2", port) + request("e-1", port, qty=2)
                     + request("e-2", port))  # fmt: skip
        answers = [
            (head[9:12], ack.get("id"), ack["status"]) for head, ack in read_answers(conn, 4)
        ]
    assert answers == [
        (b"200", "e-1", "applied"), (b"200", "e-2", "applied"), (b"422", None, 422),
        (b"200", "e-2", "duplicate"),
    ]  # fmt: skip
    assert stored(loop_sink.db)["counters"] == {
        "sink.applied": 2, "sink.conflict": 1, "sink.duplicate": 1,
    }  # fmt: skip


def test_new_events_ready_in_one_turn_share_one_commit(loop_sink: Loop) -> None:
    port = loop_sink.port
    first, second = connect(port), connect(port)
    with first, second:
        time.sleep(0.2)  # both accepted
        before = commits(loop_sink.db)
        # Stopped, the sink finds both requests ready at once when it wakes.
        os.kill(loop_sink.pid, signal.SIGSTOP)
        try:
            first.sendall(request("e-a", port))
            second.sendall(request("e-b", port))
            time.sleep(0.1)
        finally:
            os.kill(loop_sink.pid, signal.SIGCONT)
        acks = [read_answers(conn, 1)[0][1]["status"] for conn in (first, second)]
    assert acks == ["applied", "applied"]
    assert commits(loop_sink.db) == before + 1
    assert stored(loop_sink.db)["inventory"] == {"sku-2": 2}
