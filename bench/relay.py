"""Accept, and the relay end to end: one at a time, and in batches.

The relay runs in this process against a real ``ackledger serve sink`` process, both databases
with synchronous=FULL. The clock runs from the first dispatch to the last mark.
"""

from __future__ import annotations

import inspect
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import ackledger
from ackledger import Outbox
from ackledger.ops.processes import Service, cli_command, run_cli, start_service
from ackledger.source.dispatch import dispatch, dispatch_batch
from ackledger.source.marking import MarksBehind
from ackledger.wire.http import close_connections, send_http, send_http_batch

from . import fill, latency
from .common import Plan, Results, cpu_seconds, marks_rate, rate, scratch
from .floors import Probe, handover_floor


def accept_rate(folder: Path, synchronous: str, count: int, prefix: str) -> float:
    path = folder / f"accept-{prefix}.db"
    events = [fill.order(prefix, n) for n in range(count)]
    with Outbox(path, synchronous=synchronous) as outbox:
        outbox.accept(fill.order(prefix + "-warm", 0))
        start = time.perf_counter()
        for item in events:
            outbox.accept(item)
        return rate(count, time.perf_counter() - start)


def start_sink(folder: Path, name: str, *extra: str) -> Service:
    return start_service(
        ["serve", "sink", "--db", str(folder / f"{name}.db"), "--port", "0", *extra],
        stderr_path=folder / f"{name}.log",
    )


def relay_rate(
    source: Path,
    url: str,
    *,
    batch: bool,
    mark_sync: str = "each",
    own: bool = False,
    behind: bool = False,
) -> tuple[int, float, float]:
    """Drain ``source`` into the sink at ``url``; returns (events, events per second, this
    process's CPU µs per event). ``own``: one at a time through the relay's own sender
    (``ackledger.sender(url).send``, as ``ackledger relay`` sends) instead of a wrapper of
    ``send_http``: where a checkout has it, the stored text goes as it is. ``behind``: one at
    a time, each mark committed on a second connection behind the next send
    (``dispatch(behind=MarksBehind(...))``; its thread's CPU is this process's too)."""
    total = 0
    cpu = time.process_time()
    if behind:
        target = url + "/events"
        with (
            Outbox(source, synchronous="FULL") as outbox,
            Outbox(source, synchronous="FULL") as marker,
        ):
            marks = MarksBehind(outbox, marker)
            start = end = time.perf_counter()
            while marked := dispatch(
                outbox, lambda event: send_http(event, target), 16, behind=marks
            ):
                total += len(marked)
                end = time.perf_counter()
            marks.close()  # the last mark's commit: part of the run, as for the others
            end = time.perf_counter()
        close_connections()
        return total, rate(total, end - start), _cpu_per_event(cpu, total)
    if own:
        wire = ackledger.sender(url + "/events")
        start = end = time.perf_counter()
        with Outbox(source, synchronous="FULL") as outbox:
            while marked := dispatch(outbox, wire.send, 16, mark_sync=mark_sync):
                total += len(marked)
                end = time.perf_counter()
        wire.close()
        return total, rate(total, end - start), _cpu_per_event(cpu, total)
    with Outbox(source, synchronous="FULL") as outbox:
        if batch:
            target = url + "/events/batch"

            def send_batch(events: list[dict[str, Any]]) -> int:
                return send_http_batch(events, target)

            start = time.perf_counter()
            end = start
            while marked := dispatch_batch(outbox, send_batch, 16):
                total += len(marked)
                end = time.perf_counter()
        else:
            target = url + "/events"

            def send(event: dict[str, Any]) -> bool:
                return send_http(event, target)

            start = time.perf_counter()
            end = start
            while marked := dispatch(outbox, send, 16, mark_sync=mark_sync):
                total += len(marked)
                end = time.perf_counter()
    close_connections()
    return total, rate(total, end - start), _cpu_per_event(cpu, total)


def _cpu_per_event(started: float, count: int) -> float:
    return 1e6 * (time.process_time() - started) / count if count else float("nan")


def relay_daemon_has_batch() -> bool:
    """True once ``ackledger relay --batch`` exists (the relay is built on another branch)."""
    answer = run_cli("relay", "--help", timeout=30)
    return answer.returncode == 0 and "--batch" in answer.stdout


def _marks_span(source: Path, total: int, timeout: float) -> float:
    # Bench-only reads from a separate connection: the daemon is another process.
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True, isolation_level=None)
    try:
        return marks_rate(lambda sql, params: conn.execute(sql, params).fetchall(), total, timeout)
    finally:
        conn.close()


def daemon_rate(source: Path, url: str, total: int, *extra: str) -> float:
    """Events/s of ``ackledger relay --batch``, from its first mark to its last one.

    The clock starts at the first mark, so the interpreter's start-up is not counted.
    """
    process = subprocess.Popen(
        cli_command("relay", "--source", str(source), "--to", url + "/events", "--batch", *extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return _marks_span(source, total, timeout=300)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def item_daemon_run(
    source: Path, url: str, total: int, sink_pid: int, *extra: str
) -> tuple[float, float, float]:
    """``ackledger relay`` one event a request (no ``--batch``, its own HTTP sender), as an
    operator runs it: (events/s from its first mark to its last, the relay process's and the
    sink's CPU µs per event over the same marks)."""
    process = subprocess.Popen(
        cli_command("relay", "--source", str(source), "--to", url + "/events", *extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True, isolation_level=None)
    try:
        # The CPU clocks start at the first mark, like the rate: the interpreter's start-up
        # and the outbox's opening are not per-event work.
        deadline = time.monotonic() + 60
        while not conn.execute("SELECT 1 FROM ackledger_outbox WHERE sent = 1 LIMIT 1").fetchall():
            if time.monotonic() > deadline or process.poll() is not None:
                return float("nan"), float("nan"), float("nan")
            time.sleep(0.002)
        relay_cpu, sink_cpu = cpu_seconds(process.pid), cpu_seconds(sink_pid)
        (marked,) = conn.execute("SELECT count(*) FROM ackledger_outbox WHERE sent = 1").fetchone()
        value = marks_rate(lambda sql, params: conn.execute(sql, params).fetchall(), total, 300)
        relay_cpu, sink_cpu = cpu_seconds(process.pid) - relay_cpu, cpu_seconds(sink_pid) - sink_cpu
    finally:
        conn.close()
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    count = total - marked
    return value, 1e6 * relay_cpu / count, 1e6 * sink_cpu / count


def _item_behind(source: Path, sink: Service, probe: Probe, plan: Plan, results: Results) -> None:
    """The per-item relay with each mark committed behind the next send, paired with
    ``relay.item`` in the same repetition, with the hand-over floor measured around it."""
    fill.pending_events(source, f"ib{source.stem}", plan.relay_events)
    before = probe(plan.floor_seconds)
    _, value, cpu = relay_rate(source, sink.base_url, batch=False, behind=True)
    around = (before + probe(plan.floor_seconds)) / 2
    words = "per-item relay, marks behind (dispatch behind=...)"
    results.add("relay.item_behind", words, "/s", value)
    results.add(
        "relay.item_behind_handover",
        f"{words} / the zero-code hand-over floor measured around it",
        "x",
        value / around,
    )
    results.add("relay.item_behind_cpu", f"{words}: the relay's CPU per event", "µs", cpu)


def _item_daemons(pipeline: bool, reverse: bool) -> list[tuple[str, tuple[str, ...], str]]:
    """The per-item daemon runs (key, its flags, its words): serial and (where the checkout
    has it) ``--pipeline``, paired in each repetition, in reverse order if ``reverse``."""
    runs: list[tuple[str, tuple[str, ...], str]] = [("relay.item_daemon", (), "")]
    if pipeline:
        runs.append(("relay.item_daemon_pipeline", ("--pipeline",), " --pipeline"))
    return [
        (key, extra, f"per-item relay daemon (`ackledger relay{flags}`, its own sender)")
        for key, extra, flags in (runs[::-1] if reverse else runs)
    ]


def measure_accept(plan: Plan, results: Results) -> None:
    print("accept", flush=True)
    with scratch("accept") as folder:
        for rep in range(plan.reps):
            for mode in ("FULL", "NORMAL"):
                count = plan.accept_events if mode == "FULL" else plan.accept_events * 4
                value = accept_rate(folder, mode, count, f"a{rep}{mode}")
                results.add(
                    f"accept.{mode.lower()}", f"Outbox.accept, synchronous={mode}", "/s", value
                )
    for mode in ("full", "normal"):
        print(f"  accept {mode}: {results.figures[f'accept.{mode}'].median:,.0f}/s", flush=True)


def measure_relay(plan: Plan, results: Results) -> None:
    print("relay", flush=True)
    daemon = relay_daemon_has_batch()
    if not daemon:
        results.skip("relay.daemon", "`ackledger relay --batch` is not available on this branch")
    # Installs older than ackledger.sender skip the own-sender runs.
    own_runs = (
        (("own", fill.event, "lab"), ("gown", fill.generic, "generic"))
        if hasattr(ackledger, "sender")
        else ()
    )
    # Installs before per-item marks behind skip those runs.
    behind = "behind" in inspect.signature(dispatch).parameters
    daemon_item_pipeline = behind and daemon
    with scratch("relay") as folder, handover_floor(folder) as probe:
        sink = start_sink(folder, "sink", "--handlers", "bench.handlers:HANDLERS")
        try:
            for rep in range(plan.reps):
                if daemon:
                    source = folder / f"daemon-{rep}.db"
                    fill.pending_events(source, f"d{rep}", plan.batch_events)
                    results.add(
                        "relay.daemon",
                        "batch relay daemon (`ackledger relay --batch`)",
                        "/s",
                        daemon_rate(source, sink.base_url, plan.batch_events),
                    )
                    source = folder / f"pipe-{rep}.db"
                    fill.pending_events(source, f"p{rep}", plan.batch_events)
                    results.add(
                        "relay.daemon_pipeline",
                        "batch relay daemon, marks behind the next send "
                        "(`ackledger relay --batch --pipeline`)",
                        "/s",
                        daemon_rate(source, sink.base_url, plan.batch_events, "--pipeline"),
                    )
                # Paired runs, alternated: behind after serial in even repetitions, before it
                # in odd ones (the same sender wrapper, the same sink).
                if behind and rep % 2 == 1:
                    _item_behind(folder / f"behind-{rep}.db", sink, probe, plan, results)
                source = folder / f"item-{rep}.db"
                fill.pending_events(source, f"i{rep}", plan.relay_events)
                # The floor right before and right after the run: on a shared machine the
                # floors section's figure is minutes away from this one.
                before = probe(plan.floor_seconds)
                _, value, cpu = relay_rate(source, sink.base_url, batch=False)
                around = (before + probe(plan.floor_seconds)) / 2
                results.add("relay.item", "per-item relay (dispatch + send_http)", "/s", value)
                # The paired floor's own rate too, to set beside the floors section's.
                results.add(
                    "relay.item_floor",
                    "the zero-code hand-over floor measured around each per-item run",
                    "/s",
                    around,
                )
                results.add(
                    "relay.item_cpu", "per-item relay: the relay's CPU per event", "µs", cpu
                )
                results.add(
                    "relay.item_handover",
                    "per-item relay / the zero-code hand-over floor measured around it",
                    "x",
                    value / around,
                )
                if behind and rep % 2 == 0:
                    _item_behind(folder / f"behind-{rep}.db", sink, probe, plan, results)
                for key, extra, words in _item_daemons(daemon_item_pipeline, rep % 2 == 1):
                    source = folder / f"itemd{len(extra)}-{rep}.db"
                    fill.pending_events(source, f"id{len(extra)}{rep}", plan.relay_events)
                    before = probe(plan.floor_seconds)
                    value, cpu, sink_cpu = item_daemon_run(
                        source, sink.base_url, plan.relay_events, sink.process.pid, *extra
                    )
                    around = (before + probe(plan.floor_seconds)) / 2
                    results.add(key, words, "/s", value)
                    results.add(
                        f"{key}_handover",
                        f"{words} / the zero-code hand-over floor measured around it",
                        "x",
                        value / around,
                    )
                    results.add(f"{key}_cpu", f"{words}: its CPU per event", "µs", cpu)
                    results.add(
                        f"{key}_sink_cpu", f"{words}: the sink's CPU per event", "µs", sink_cpu
                    )
                source = folder / f"last-{rep}.db"
                fill.pending_events(source, f"l{rep}", plan.relay_events)
                _, value, _ = relay_rate(source, sink.base_url, batch=False, mark_sync="last")
                results.add(
                    "relay.item_last",
                    "per-item relay, one mark fsync per call (dispatch mark_sync='last')",
                    "/s",
                    value,
                )
                source = folder / f"generic-{rep}.db"
                fill.pending_events(source, f"g{rep}", plan.relay_events, fill.generic)
                _, value, cpu = relay_rate(source, sink.base_url, batch=False)
                results.add(
                    "relay.item_generic_cpu",
                    "per-item relay of a generic event: the relay's CPU per event",
                    "µs",
                    cpu,
                )
                results.add(
                    "relay.item_generic",
                    "per-item relay of a generic event (1 KiB nested data, a user handler)",
                    "/s",
                    value,
                )
                for kind, make, what in own_runs:
                    source = folder / f"{kind}-{rep}.db"
                    fill.pending_events(source, f"{kind[0]}o{rep}", plan.relay_events, make)
                    _, value, cpu = relay_rate(source, sink.base_url, batch=False, own=True)
                    key = "relay.item_own" if what == "lab" else "relay.item_generic_own"
                    words = f"per-item relay, own sender (dispatch + sender(url).send), {what}"
                    results.add(key, words, "/s", value)
                    results.add(f"{key}_cpu", f"{words}: the relay's CPU per event", "µs", cpu)
                source = folder / f"batch-{rep}.db"
                fill.pending_events(source, f"b{rep}", plan.batch_events)
                _, value, _ = relay_rate(source, sink.base_url, batch=True)
                results.add(
                    "relay.batch", "batch relay (dispatch_batch + send_http_batch)", "/s", value
                )
                for path in folder.glob("*-[0-9]*.db*"):
                    os.unlink(path)
            count = latency.events_for(plan)
            for mode, flags in latency.HTTP_MODES:
                key, label = f"latency.sqlite.http.{mode}", latency.http_label("sqlite", flags)
                url = sink.base_url + "/events"
                latency.run_row(
                    results, key, label, folder / f"{mode}.db", url, *flags, count=count
                )
        finally:
            sink.stop()
    item = results.get("relay.item")
    batch = results.get("relay.batch")
    floor = results.get("floor.relay")
    handover = results.get("floor.handover")
    print(f"  per-item relay: {item or 0:,.0f}/s (summed floor {floor or 0:,.0f}/s)", flush=True)
    if item and handover:
        # The goal: at least 0.7 of the same three steps done with no ackledger code.
        print(
            f"  per-item relay / zero-code hand-over floor ({handover:,.0f}/s): "
            f"{item / handover:.2f}; paired with the floor measured around each run "
            f"({results.get('relay.item_floor') or 0:,.0f}/s): "
            f"{results.get('relay.item_handover') or 0:.2f}",
            flush=True,
        )
    daemon_item = results.get("relay.item_daemon")
    print(
        f"  per-item relay daemon (`ackledger relay`): {daemon_item or 0:,.0f}/s, / hand-over "
        f"floor around it {results.get('relay.item_daemon_handover') or 0:.2f}; CPU per event: "
        f"relay {results.get('relay.item_daemon_cpu') or 0:,.0f} µs, "
        f"sink {results.get('relay.item_daemon_sink_cpu') or 0:,.0f} µs",
        flush=True,
    )
    _print_behind(results)
    last = results.get("relay.item_last")
    print(f"  per-item relay, mark_sync='last': {last or 0:,.0f}/s", flush=True)
    print(f"  batch relay: {batch or 0:,.0f} events/s", flush=True)
    generic = results.get("relay.item_generic")
    print(f"  per-item relay, generic 1 KiB events: {generic or 0:,.0f}/s", flush=True)
    for what, key in (("lab", "relay.item"), ("generic", "relay.item_generic")):
        print(
            f"  per-item relay CPU per event, {what}: wrapper {results.get(key + '_cpu') or 0:,.0f}"
            f" µs, own sender {results.get(key + '_own_cpu') or 0:,.0f} µs",
            flush=True,
        )


def _print_behind(results: Results) -> None:
    """The per-item runs with marks behind the next send, beside the serial ones."""
    for serial, piped, what in (
        ("relay.item", "relay.item_behind", "dispatch behind=..."),
        ("relay.item_daemon", "relay.item_daemon_pipeline", "`ackledger relay --pipeline`"),
    ):
        value = results.get(piped)
        if value is None:
            continue
        line = (
            f"  per-item relay, marks behind ({what}): {value:,.0f}/s "
            f"(serial {results.get(serial) or 0:,.0f}/s), / hand-over floor around it "
            f"{results.get(piped + '_handover') or 0:.2f}, CPU per event "
            f"{results.get(piped + '_cpu') or 0:,.0f} µs (serial "
            f"{results.get(serial + '_cpu') or 0:,.0f} µs)"
        )
        print(line, flush=True)
