"""``python -m bench.relay_cpu``: the batch relay's CPU per event, and the sink's, against v1.

A wall-clock rate of the batch relay on a shared 2-core machine moves with the neighbours by
more than the gap to v1 that issue 13 asks about; CPU time per event moves far less. Each run
fills a fresh outbox (a SQLite file, or a scratch PostgreSQL database with ``--postgres``) with
``--events`` events and drains it in batches of 16 into a fresh ``ackledger serve sink`` (its
inbox a SQLite file), in one of these ways:

- ``inproc``: ``dispatch_batch`` in this process with a function that calls
  ``send_http_batch`` (bench/relay.py's in-process batch figure): the CPU is this process's;
- ``own``: ``dispatch_batch`` with ``ackledger.sender(url).send_batch``, the relay's own
  sender (from the ninth session on, the stored text goes as it is);
- ``item``, ``itemlast``: ``dispatch`` (one event at a time, ``mark_sync='last'`` for the
  second) with a function that calls ``send_http`` (bench/relay.py's per-item figures);
- ``itemown``: ``dispatch`` with ``ackledger.sender(url).send`` (not in v1);
- ``daemon``, ``pipeline``: an ``ackledger relay --batch`` process (``--pipeline`` too),
  its CPU from ``/proc/PID/stat`` at the last mark, less what one spends starting and idling
  2 s on an empty outbox.

The sink's CPU over the same drain is given beside it (per event, from ``/proc``): on the
machine's two cores the two are in series for each batch. The events are self-made (no
bench.fill), so that one bench measures every checkout back to v1 (1b29a1e), whose outbox
takes the lab order ``{"id", "sku", "qty"}``.

Variants, like ``bench.compare``'s: ``NAME=SRC`` (a ``src`` folder) or ``current``, run in
ABBA order, one child process per run::

    python -m bench.relay_cpu --ways inproc,daemon --rounds 2 v1=/work/wt/v1/src current
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import cpu_seconds, marks_rate

WAYS = ("inproc", "own", "item", "itemlast", "itemown", "daemon", "pipeline")
#: The per-item ways: one event a request, ``dispatch`` in this process.
ITEM_WAYS = ("item", "itemlast", "itemown")
BATCH = 16
CHUNK = 2_000


def _event(number: int, workload: str, v1: bool) -> dict[str, Any]:
    event_id, sku, qty = f"rc-{number:07d}", f"sku-{number % 64}", 1 + number % 7
    if v1:
        return {"id": event_id, "sku": sku, "qty": qty}
    from ackledger import new_event, warehouse

    if workload == "lab":
        return warehouse.event(event_id, sku, qty, source="urn:ackledger:bench")
    lines = [
        {"sku": f"sku-{(number + line) % 64}", "qty": 1 + line,
         "price": {"amount": 1250 + line, "currency": "EUR"},
         "note": "gift wrap" if line % 2 else None}
        for line in range(8)
    ]  # fmt: skip
    data = {
        "order": event_id, "customer": {"id": f"c-{number % 97}", "tier": "gold"},
        "lines": lines, "total": {"amount": 10_000 + number, "currency": "EUR"},
    }  # fmt: skip
    return new_event(
        "bench.order.placed", data, source="urn:ackledger:bench", id=event_id,
        partitionkey=f"c-{number % 97}",
    )  # fmt: skip


def _is_v1() -> bool:
    from ackledger import Outbox

    return not hasattr(Outbox, "publish")  # v1's outbox took the lab order only


def _fill(target: str, count: int, workload: str) -> None:
    from ackledger import Outbox

    v1 = _is_v1()
    with Outbox(target, synchronous="NORMAL") as outbox:
        for start in range(0, count, CHUNK):
            with outbox.transaction() as tx:
                for number in range(start, min(count, start + CHUNK)):
                    tx.enqueue(_event(number, workload, v1))


@contextmanager
def _source(path: Path, postgres: bool) -> Iterator[str]:
    """The outbox's target: the SQLite file ``path``, or a fresh PostgreSQL database."""
    if not postgres:
        yield str(path)
        return
    from .postgres import database

    with database() as url:
        yield url


def _query(target: str) -> Any:
    """A read-only query on the outbox from a connection of its own (the relay is another
    process, or at least another connection)."""
    if target.startswith("postgresql://"):
        import psycopg

        conn = psycopg.connect(target, autocommit=True)
        return conn, lambda sql, params: conn.execute(sql.replace("?", "%s"), params).fetchall()
    lite = sqlite3.connect(f"file:{target}?mode=ro", uri=True, isolation_level=None)
    return lite, lambda sql, params: lite.execute(sql, params).fetchall()


def _relay_args(target: str, url: str, way: str) -> list[str]:
    from ackledger._dev.procs import cli_command

    flags = ["--batch"] + (["--pipeline", "--single"] if way == "pipeline" else [])
    if way == "pipeline" and not target.startswith("postgresql://"):
        flags.remove("--single")
    return cli_command("relay", "--source", target, "--to", url + "/events", *flags)


def _startup_cpu(target: str, url: str, way: str) -> float:
    """CPU seconds a relay spends starting and idling 2 s on an empty outbox."""
    from ackledger import Outbox

    Outbox(target).close()  # the schema, so the relay finds nothing to migrate
    process = subprocess.Popen(
        _relay_args(target, url, way), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(2.0)
        return cpu_seconds(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


@contextmanager
def _spying(pid: int, profile: str | None) -> Iterator[None]:
    """py-spy's raw record of process ``pid`` while the block runs (with ``profile``)."""
    if profile is None:
        yield
        return
    spy = subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "-r", "1000", "-f", "raw",
         "-o", profile, "--pid", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the clock starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def one_run(
    way: str, events: int, workload: str, postgres: bool, profile: str | None = None
) -> dict[str, float]:
    """Drain ``events`` events one ``way``; the relay's and the sink's CPU µs per event.
    ``profile``: py-spy raw records of the relay (that path) and of the sink (+ ``.sink``)."""
    import ackledger
    from ackledger import Outbox
    from ackledger._dev.procs import start_service
    from ackledger.source.dispatch import dispatch, dispatch_batch
    from ackledger.wire.http import close_connections, send_http, send_http_batch

    with tempfile.TemporaryDirectory(prefix="ackledger-bench-relaycpu-") as name:
        folder = Path(name)
        extra = [] if workload == "lab" else ["--handlers", "bench.handlers:HANDLERS"]
        sink = start_service(
            ["serve", "sink", "--db", str(folder / "sink.db"), "--port", "0", *extra],
            stderr_path=folder / "sink.log",
        )
        try:
            with _source(folder / "outbox.db", postgres) as target:
                start = 0.0
                if way in ("daemon", "pipeline"):
                    with _source(folder / "idle.db", postgres) as idle:
                        start = _startup_cpu(idle, sink.base_url, way)
                _fill(target, events, workload)
                sink_before = cpu_seconds(sink.process.pid)
                wall = time.perf_counter()
                sink_spy = _spying(sink.process.pid, profile and profile + ".sink")
                if way in ITEM_WAYS:
                    used = time.process_time()
                    with (
                        sink_spy,
                        _spying(os.getpid(), profile),
                        Outbox(target, synchronous="FULL") as outbox,
                    ):
                        sync = "last" if way == "itemlast" else "each"
                        if way == "itemown":
                            wire = ackledger.sender(sink.base_url + "/events")
                            send: Any = wire.send
                        else:
                            item_url = sink.base_url + "/events"

                            def send(item: dict[str, Any]) -> bool:
                                return send_http(item, item_url)

                        while dispatch(outbox, send, BATCH, mark_sync=sync):
                            pass
                        if way == "itemown":
                            wire.close()
                    relay = time.process_time() - used
                    close_connections()
                    elapsed = time.perf_counter() - wall
                elif way in ("inproc", "own"):
                    used = time.process_time()
                    with (
                        sink_spy,
                        _spying(os.getpid(), profile),
                        Outbox(target, synchronous="FULL") as outbox,
                    ):
                        if way == "own":
                            wire = ackledger.sender(sink.base_url + "/events")
                            send_batch: Any = wire.send_batch
                        else:
                            batch_url = sink.base_url + "/events/batch"

                            def send_batch(items: list[dict[str, Any]]) -> int:
                                return send_http_batch(items, batch_url)

                        while dispatch_batch(outbox, send_batch, BATCH):
                            pass
                        if way == "own":
                            wire.close()
                    relay = time.process_time() - used
                    close_connections()
                    elapsed = time.perf_counter() - wall
                else:
                    conn, query = _query(target)
                    process = subprocess.Popen(
                        _relay_args(target, sink.base_url, way),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                    try:
                        with sink_spy, _spying(process.pid, profile):
                            value = marks_rate(query, events, timeout=600)
                        relay = cpu_seconds(process.pid) - start
                    finally:
                        process.send_signal(signal.SIGTERM)
                        process.wait(30)
                        conn.close()
                    elapsed = events / value
                sink_cpu = cpu_seconds(sink.process.pid) - sink_before
        finally:
            sink.stop()
    return {
        "relay_us": 1e6 * relay / events,
        "sink_us": 1e6 * sink_cpu / events,
        "rate": events / elapsed,
    }


def _child(args: argparse.Namespace) -> int:
    found = one_run(args.one, args.events, args.workload, args.postgres, args.profile)
    print(json.dumps(found))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_cpu", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (2)")
    parser.add_argument("--ways", default="inproc,daemon", help=f"of {', '.join(WAYS)}")
    parser.add_argument("--workload", choices=("lab", "generic"), default="lab")
    parser.add_argument("--postgres", action="store_true", help="the outbox on PostgreSQL")
    parser.add_argument("--one", choices=WAYS, help="one run this way, in this process")
    parser.add_argument("--profile", help="with --one: py-spy raw records to FILE, FILE.sink")
    parser.add_argument("variants", nargs="*", default=["current"], help="NAME=SRC or current")
    args = parser.parse_args(argv)
    if args.one:
        return _child(args)
    ways = [way for way in args.ways.split(",") if way]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"--ways: unknown {', '.join(sorted(unknown))}")
    variants = [(v, None) if v == "current" else tuple(v.split("=", 1)) for v in args.variants]
    samples: dict[tuple[str, str, str], list[float]] = {}
    for round_number in range(args.rounds):
        ordered = variants if round_number % 2 == 0 else variants[::-1]
        for name, src in ordered:
            env = dict(os.environ)
            if src:
                env["PYTHONPATH"] = str(src)
            for way in ways:
                command = [
                    sys.executable, "-m", "bench.relay_cpu", "--one", way,
                    "--events", str(args.events), "--workload", args.workload,
                ] + (["--postgres"] if args.postgres else [])  # fmt: skip
                load = os.getloadavg()[0]
                done = subprocess.run(
                    command, env=env, check=True, stdout=subprocess.PIPE, text=True
                )
                found = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"round {round_number} {name} {way}: relay {found['relay_us']:.1f} µs, "
                    f"sink {found['sink_us']:.1f} µs CPU/event, {found['rate']:,.0f}/s "
                    f"(load {load:.1f})",
                    flush=True,
                )
                for key, value in found.items():
                    samples.setdefault((name, way, key), []).append(value)
    names = [name for name, _ in variants]
    print("\n| way: median | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for way in ways:
        for key, unit in (("relay_us", "relay µs CPU/event"), ("sink_us", "sink µs CPU/event"),
                          ("rate", "events/s")):  # fmt: skip
            cells = [
                f"{statistics.median(samples[(name, way, key)]):,.1f}"
                if (name, way, key) in samples
                else "-"
                for name in names
            ]
            print(f"| {way}: {unit} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
