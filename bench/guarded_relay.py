"""The guarded hand-over's relay side, and the probes of both hand-over floors (issue 18).

The zero-code hand-over (``floors.handover_floor``) is what the machine allows: a round trip
and a one-row FULL commit on each side, no checks. The guarded hand-over is the same two
processes and kept raw socket doing, in the most direct Python, exactly the work the CONTRACT
requires of each side for one event (bare ``sqlite3``, no ackledger code in either process):

- this side (sections 3-5): select the next pending rows (seq, id, source, stored text) in
  ``seq`` order from a real outbox table, up to 16 at a time with no transaction held while
  sending (``dispatch``); POST each stored text as an HTTP/1.1 request with
  ``Content-Type: application/cloudevents+json`` and ``Content-Length``; read the answer by
  its Content-Length (at most 64 KiB, no Transfer-Encoding); accept only a 200 whose JSON
  object has ``"ack": true`` and this event's id and source; then mark it sent (sent, sent_at,
  attempts, last_attempt_at; a quarantined row is not made sent) in a FULL commit of its own;
- the sink (section 6): ``guarded_sink.py``.

Each hand-over also runs "mark behind": the mark of event N is committed on a second thread
and connection while event N+1 travels (each mark still one FULL commit, at most one in
flight), the floor of a relay that pipelines its per-item marks.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import queue
import socket
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

#: The outbox in ackledger's shape (written out, so the floor is the same for every checkout).
OUTBOX_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ackledger_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "id TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL, partition_key TEXT NOT NULL, "
    "sent INTEGER NOT NULL DEFAULT 0 CHECK (sent IN (0, 1)), "
    "quarantined INTEGER NOT NULL DEFAULT 0 CHECK (quarantined IN (0, 1)), "
    "quarantine_reason TEXT, quarantined_at REAL, created_at REAL NOT NULL, sent_at REAL, "
    "attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, last_attempt_at REAL, source TEXT, "
    "type TEXT, subject TEXT, partitionkey TEXT, data TEXT, event TEXT)",
    "CREATE INDEX IF NOT EXISTS ackledger_outbox_pending ON ackledger_outbox (seq) "
    "WHERE sent = 0 AND quarantined = 0",
    "CREATE INDEX IF NOT EXISTS ackledger_outbox_sent_at ON ackledger_outbox (sent_at) "
    "WHERE sent = 1",
    "CREATE INDEX IF NOT EXISTS ackledger_outbox_quarantined ON ackledger_outbox (seq) "
    "WHERE quarantined = 1 AND sent = 0",
)
_PENDING = (
    "SELECT id, source, event FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 "
    "ORDER BY seq LIMIT 16"
)
#: The per-item mark as ackledger makes it (a quarantined row keeps its hold), without the
#: RETURNING: the row count says whether the id was there.
_MARK = (
    "UPDATE ackledger_outbox SET sent = CASE WHEN quarantined = 0 THEN 1 ELSE sent END, "
    "sent_at = CASE WHEN quarantined = 0 THEN COALESCE(sent_at, ?) ELSE sent_at END, "
    "attempts = attempts + 1, last_attempt_at = ? WHERE id = ?"
)
SOURCE = "urn:ackledger:bench"
MAX_ANSWER = 64 * 1024


def lab_text(event_id: str, number: int) -> str:
    """The canonical JSON of a lab event (the shape ``bench.fill.event`` makes)."""
    sku = f"sku-{number % 64}"
    return (
        f'{{"data":{{"qty":{1 + number % 7},"sku":"{sku}"}},"id":"{event_id}",'
        f'"partitionkey":"{sku}","source":"{SOURCE}","specversion":"1.0","subject":"{sku}",'
        f'"type":"warehouse.stock.added"}}'
    )


def fill_outbox(path: Path, prefix: str, count: int) -> None:
    """``count`` pending lab events in a fresh outbox file (bulk insert; not measured)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA page_size = 2048")
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in OUTBOX_SCHEMA:
            conn.execute(statement)
        now = time.time()
        rows = []
        for number in range(count):
            event_id = f"{prefix}-{number}"
            text = lab_text(event_id, number)
            sku = f"sku-{number % 64}"
            data = f'{{"qty":{1 + number % 7},"sku":"{sku}"}}'
            fingerprint = hashlib.sha256(text.encode()).hexdigest()
            rows.append((event_id, fingerprint, sku, now, SOURCE, sku, sku, data, text))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO ackledger_outbox (id, fingerprint, partition_key, created_at, source, "
            "type, subject, partitionkey, data, event) "
            "VALUES (?, ?, ?, ?, ?, 'warehouse.stock.added', ?, ?, ?, ?)",
            rows,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


class NotAcked(Exception):
    """The answer is not the exact ACK of the event sent."""


class Wire:
    """A kept raw socket to ``/events``: POST a stored text, check the answer is its ACK."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = (
            b"POST /events HTTP/1.1\r\nHost: %s:%d\r\n"
            b"Content-Type: application/cloudevents+json\r\nContent-Length: "
        ) % (host.encode(), port)
        self.buffer = b""

    def send(self, event_id: str, source: str, text: str) -> str:
        """POST one event; returns the answer's status word, or NotAcked."""
        body = text.encode()
        self.sock.sendall(self.head + b"%d\r\n\r\n" % len(body) + body)
        status, answer = self._answer()
        if status != 200:
            raise NotAcked(f"HTTP {status}")
        try:
            ack = json.loads(answer.decode("utf-8"))
        except ValueError:
            raise NotAcked("answer is not JSON") from None
        if type(ack) is not dict or ack.get("ack") is not True:
            raise NotAcked("not an ACK")
        if ack.get("id") != event_id or ack.get("source") != source:
            raise NotAcked("an ACK of another event")
        return str(ack.get("status"))

    def _answer(self) -> tuple[int, bytes]:
        """(status, body) of one answer framed by Content-Length (nothing else is taken)."""
        buffer = self.buffer
        head_end = buffer.find(b"\r\n\r\n")
        while head_end < 0:
            buffer += self._recv()
            head_end = buffer.find(b"\r\n\r\n")
        lines = buffer[:head_end].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if version != b"HTTP/1.1" or not rest[:3].isdigit():
            raise NotAcked("malformed status line")
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                if length is not None:
                    raise NotAcked("content-length given twice")
                length = value.strip()
            elif name == b"transfer-encoding":
                raise NotAcked("transfer-encoding: not taken")
        if length is None or not length.isdigit() or int(length) > MAX_ANSWER:
            raise NotAcked("answer not framed by a Content-Length within 64 KiB")
        end = head_end + 4 + int(length)
        while len(buffer) < end:
            buffer += self._recv()
        self.buffer = buffer[end:]
        return int(rest[:3]), buffer[head_end + 4 : end]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the sink closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def outbox_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def mark(conn: sqlite3.Connection, event_id: str) -> None:
    """One event's mark, in a FULL commit of its own."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    if conn.execute(_MARK, (now, now, event_id)).rowcount != 1:
        conn.execute("ROLLBACK")
        raise KeyError(event_id)
    conn.execute("COMMIT")


class Behind:
    """Commits on a thread of its own, one at a time and in order, behind the caller:
    ``hand(commit)`` waits for the previous commit (at most one in flight), then starts this
    one; ``drain()`` waits for the last. A commit's failure is raised at the next hand-over."""

    def __init__(self) -> None:
        self.todo: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self.owed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (commit := self.todo.get()) is not None:
            try:
                commit()
                self.done.put(None)
            except BaseException as exc:  # handed back to the caller
                self.done.put(exc)

    def hand(self, commit: Callable[[], None]) -> None:
        self.drain()
        self.todo.put(commit)
        self.owed = True

    def drain(self) -> None:
        if self.owed:
            self.owed = False
            failure = self.done.get()
            if failure is not None:
                raise failure

    def close(self) -> None:
        self.drain()
        self.todo.put(None)
        self.thread.join()


class GuardedRelay:
    """The guarded relay's step: the next pending event sent, its ACK checked, its mark
    committed (now, or behind the next send)."""

    def __init__(self, outbox: Path, url: str, *, behind: bool = False) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.wire = Wire(host, int(port))
        self.conn = outbox_connection(outbox)
        self.selected: deque[tuple[str, str, str]] = deque()
        self.behind = Behind() if behind else None
        # The marking thread's own connection: one connection is not shared between threads.
        self.marks = outbox_connection(outbox) if behind else self.conn

    def step(self) -> None:
        if not self.selected:
            if self.behind is not None:
                self.behind.drain()  # the last mark first, or its event would be selected again
            self.selected.extend(self.conn.execute(_PENDING).fetchall())
            if not self.selected:
                raise RuntimeError("the outbox ran out of pending events")
        event_id, source, text = self.selected.popleft()
        self.wire.send(event_id, source, text)
        if self.behind is None:
            mark(self.conn, event_id)
        else:
            marks = self.marks
            self.behind.hand(lambda: mark(marks, event_id))

    def close(self) -> None:
        if self.behind is not None:
            self.behind.close()
            self.marks.close()
        self.conn.close()
        self.wire.close()


def task_cpu_seconds(pid: int) -> float:
    """A process's CPU time from ``/proc/PID/task/*/schedstat`` (nanoseconds, every thread):
    ``/proc/PID/stat`` counts in clock ticks (10 ms), too coarse for a 0.4 s sample."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as stat:
            total += int(stat.read().split()[0])
    return total / 1e9


class Sample:
    """One timed run of a step: events per second, and each side's CPU µs per event."""

    __slots__ = ("rate", "relay_cpu", "sink_cpu")

    def __init__(self, rate: float, relay_cpu: float, sink_cpu: float) -> None:
        self.rate, self.relay_cpu, self.sink_cpu = rate, relay_cpu, sink_cpu


def run_for(step: Callable[[], object], seconds: float, sink_pid: int) -> Sample:
    """Call ``step`` for ``seconds`` (the first call untimed: it may connect or select)."""
    step()
    count = 0
    cpu, sink_cpu = time.process_time(), task_cpu_seconds(sink_pid)
    start = now = time.perf_counter()
    deadline = start + seconds
    while now < deadline:
        step()
        count += 1
        now = time.perf_counter()
    wall = now - start
    cpu, sink_cpu = time.process_time() - cpu, task_cpu_seconds(sink_pid) - sink_cpu
    return Sample(count / wall, 1e6 * cpu / count, 1e6 * sink_cpu / count)


def guarded_handover(folder: Path, url: str, sink_pid: int, seconds: float, tag: str,
                     *, behind: bool = False) -> Sample:  # fmt: skip
    """The guarded hand-over for ``seconds`` from a fresh outbox."""
    path = folder / f"guarded-{tag}.db"
    # More than the fastest hand-over can take in the time: about 4,000/s on this machine.
    fill_outbox(path, tag, int(seconds * 12_000) + 64)
    relay = GuardedRelay(path, url, behind=behind)
    try:
        sample = run_for(relay.step, seconds, sink_pid)
        if relay.behind is not None:
            relay.behind.drain()  # the last mark is part of the run
        return sample
    finally:
        relay.close()
        for leftover in folder.glob(f"guarded-{tag}.db*"):
            leftover.unlink()


def sink_round_trips(url: str, sink_pid: int, seconds: float, tag: str) -> tuple[Sample, Sample]:
    """The guarded sink alone, from a kept raw socket: new events for ``seconds`` (each
    answer checked as the relay checks it), then the same events again (duplicates)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    wire = Wire(host, int(port))
    sent: list[tuple[str, str]] = []
    try:

        def new() -> None:
            event_id = f"{tag}-{len(sent)}"
            text = lab_text(event_id, len(sent))
            if wire.send(event_id, SOURCE, text) != "applied":
                raise NotAcked("a new event was not applied")
            sent.append((event_id, text))

        fresh = run_for(new, seconds, sink_pid)
        again = itertools.cycle(sent)

        def dup() -> None:
            event_id, text = next(again)
            if wire.send(event_id, SOURCE, text) != "duplicate":
                raise NotAcked("a re-sent event was not a duplicate")

        return fresh, run_for(dup, seconds, sink_pid)
    finally:
        wire.close()
