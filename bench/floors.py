"""The floors: what this machine physically allows, measured in the same run as the workloads.

- fdatasync: a 4 KiB overwrite made durable, as often as the disk allows;
- SQLite one-row commits in WAL, synchronous FULL and NORMAL (raw ``sqlite3``, no ackledger);
- keep-alive HTTP round trips to ``bench.rawserver`` on loopback, from ``http.client`` and
  from a kept raw socket;
- the zero-code hand-over: the per-item relay's three steps (a round trip, a one-row FULL
  commit at the receiver, one at the sender) done by two processes over a kept raw socket with
  bare ``sqlite3``, no HTTP library and no ackledger code on either side.
"""

from __future__ import annotations

import http.client
import os
import socket
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .common import Plan, Results, scratch, timed_loop
from .rawserver import ANSWER, one_row_committer

BODY = b'{"id":"floor","qty":1,"sku":"floor"}'


def fdatasync_rate(folder: Path, seconds: float) -> float:
    path = folder / "fdatasync.bin"
    block = os.urandom(4096)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:

        def step() -> None:
            os.pwrite(fd, block, 0)
            os.fdatasync(fd)

        return timed_loop(step, seconds)
    finally:
        os.close(fd)


def sqlite_commit_rate(folder: Path, synchronous: str, seconds: float) -> float:
    path = folder / f"commits-{synchronous}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")

        def step() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", ("x" * 40,))
            conn.execute("COMMIT")

        return timed_loop(step, seconds)
    finally:
        conn.close()


def http_round_trip_rate(
    url: str, seconds: float, after: Callable[[], None] | None = None
) -> float:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def exchange() -> None:
        conn.request("POST", "/events", body=BODY, headers=headers)
        response = conn.getresponse()
        response.read()

    return _round_trips(exchange, conn.close, seconds, after)


def _round_trips(
    exchange: Callable[[], None],
    close: Callable[[], None],
    seconds: float,
    after: Callable[[], None] | None,
) -> float:
    """Round trips per second of ``exchange`` (then ``after``), the first one untimed (it
    connects); ``close`` ends the connection."""

    def step() -> None:
        exchange()
        if after is not None:
            after()

    try:
        step()
        return timed_loop(step, seconds)
    finally:
        close()


def raw_round_trip_rate(url: str, seconds: float, after: Callable[[], None] | None = None) -> float:
    """Keep-alive POSTs over one kept socket: the request's bytes made once, the answer read
    by its known length (``rawserver.ANSWER``). No HTTP library: the least a client can do."""
    exchange, close = raw_exchange(url)
    return _round_trips(exchange, close, seconds, after)


def raw_exchange(url: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one round trip over a kept raw socket to ``rawserver``, the socket's close)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    request = (
        b"POST /events HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(BODY), BODY)
    )
    size = len(ANSWER)
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def exchange() -> None:
        conn.sendall(request)
        got = conn.recv(size)
        while len(got) < size:
            more = conn.recv(size - len(got))
            if not more:
                raise ConnectionError("the raw server closed the connection")
            got += more

    return exchange, conn.close


#: A hand-over probe: ``probe(seconds)`` runs the zero-code hand-over for that long and returns
#: its rate.
Probe = Callable[[float], float]


@contextmanager
def handover_floor(folder: Path) -> Iterator[Probe]:
    """The zero-code hand-over as a probe (a receiver process of its own, started once)."""
    from ackledger.ops.processes import start_listener

    rawserver = Path(__file__).with_name("rawserver.py")
    command = [sys.executable, str(rawserver), "--commit", str(folder / "handover-sink.db")]
    with start_listener(command) as durable:
        mark = one_row_committer(str(folder / "handover-source.db"))

        def probe(seconds: float) -> float:
            return raw_round_trip_rate(durable.base_url, seconds, after=mark)

        yield probe


def measure(plan: Plan, results: Results) -> None:
    print("floors", flush=True)
    from ackledger.ops.processes import start_listener

    rawserver = Path(__file__).with_name("rawserver.py")
    with (
        scratch("floors") as folder,
        start_listener([sys.executable, str(rawserver)]) as raw,
        handover_floor(folder) as handover,
    ):
        for _ in range(plan.reps):
            results.add(
                "floor.fdatasync",
                "fdatasync (4 KiB overwrite)",
                "/s",
                fdatasync_rate(folder, plan.floor_seconds),
            )
            commit = results.add(
                "floor.commit_full",
                "SQLite one-row commit, WAL, synchronous=FULL",
                "/s",
                sqlite_commit_rate(folder, "FULL", plan.floor_seconds),
            ).samples[-1]
            results.add(
                "floor.commit_normal",
                "SQLite one-row commit, WAL, synchronous=NORMAL",
                "/s",
                sqlite_commit_rate(folder, "NORMAL", plan.floor_seconds),
            )
            trip = results.add(
                "floor.http",
                "http.client keep-alive round trip to a raw socket server",
                "/s",
                http_round_trip_rate(raw.base_url, plan.floor_seconds),
            ).samples[-1]
            results.add(
                "floor.http_raw",
                "kept raw socket round trip to a raw socket server",
                "/s",
                raw_round_trip_rate(raw.base_url, plan.floor_seconds),
            )
            # One event relayed one at a time costs a commit at the sink, a commit of the mark
            # at the source and one round trip between them.
            results.add(
                "floor.relay",
                "per-item relay floor 1/(2 commits + 1 round trip)",
                "/s",
                1.0 / (2.0 / commit + 1.0 / trip),
            )
            # The same three steps done for real by two processes that hand over to each other:
            # what the machine allows a relay once its fsyncs and wake-ups interleave.
            results.add(
                "floor.handover",
                "zero-code hand-over: raw socket round trip + a one-row FULL commit on each side",
                "/s",
                handover(plan.floor_seconds),
            )
    for key in (
        "floor.fdatasync",
        "floor.commit_full",
        "floor.commit_normal",
        "floor.http",
        "floor.http_raw",
        "floor.relay",
        "floor.handover",
    ):
        figure = results.figures[key]
        print(f"  {figure.label}: {figure.median:,.0f}/s", flush=True)
