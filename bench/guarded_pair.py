"""``python -m bench.guarded_pair [--rounds N] [--events N]``: ackledger's per-item path and
both hand-over floors, alternately in one run (bench/CHANGES.md item 83).

Each round measures, one after the other: the per-item relay (``dispatch`` + ``send_http``
into a real ``serve sink``) and its own sender, the zero-code and the guarded hand-over (marks
now, then behind), ``send_http`` of new events and of the same events again to ``serve
sink``, and the guarded sink's and the guarded loop sink's new events and duplicates; each
with both processes' CPU per event (``/proc/PID/task/*/schedstat`` for the sinks,
``process_time`` for this process). Medians over the rounds, then the gap split zero-code ->
guarded -> ackledger, and the sink's guarded -> guarded loop (the service's duties, item
101) -> serve sink.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from ackledger._dev.procs import start_listener

from . import fill
from .common import scratch
from .floors import raw_exchange
from .guarded_relay import Sample, guarded_handover, sink_round_trips, task_cpu_seconds
from .handovers import guarded_sink, zero_code
from .placement import placed
from .relay import relay_rate, start_sink
from .steps import send_each

#: (key, words, unit) of each row, in the order printed.
ROWS = (
    ("item", "per-item relay (dispatch + send_http) to serve sink", "/s"),
    ("item_own", "per-item relay, own sender (the stored text sent as it is)", "/s"),
    ("zero", "zero-code hand-over", "/s"),
    ("guarded", "guarded hand-over", "/s"),
    ("zero_together", "zero-code hand-over, both processes on one CPU", "/s"),
    ("guarded_together", "guarded hand-over, both processes on one CPU", "/s"),
    ("zero_behind", "zero-code hand-over, marks behind", "/s"),
    ("guarded_behind", "guarded hand-over, marks behind", "/s"),
    ("sink_new", "send_http to serve sink, a new event", "µs"),
    ("guarded_new", "guarded sink, a new event", "µs"),
    ("sink_dup", "send_http to serve sink, a duplicate", "µs"),
    ("guarded_dup", "guarded sink, a duplicate", "µs"),
    ("loop_new", "guarded loop sink, a new event", "µs"),
    ("loop_dup", "guarded loop sink, a duplicate", "µs"),
)


def _record(found: dict[str, list[float]], key: str, sample: Sample) -> None:
    found[key].append(sample.rate)
    found[key + ".relay_cpu"].append(sample.relay_cpu)
    found[key + ".sink_cpu"].append(sample.sink_cpu)


class Sinks(NamedTuple):
    """(base URL, pid) of each receiving process."""

    ours: tuple[str, int]
    raw: tuple[str, int]
    guarded: tuple[str, int]
    loop: tuple[str, int]


def one_round(
    found: dict[str, list[float]], folder: Path, sinks: Sinks, round_no: int, events: int
) -> None:
    (ours, ours_pid), (raw, raw_pid), (url, pid), loop = sinks
    source = folder / f"item-{round_no}.db"
    fill.pending_events(source, f"i{round_no}", events)
    before = task_cpu_seconds(ours_pid)
    count, rate, cpu = relay_rate(source, ours, batch=False)
    sink_cpu = 1e6 * (task_cpu_seconds(ours_pid) - before) / count
    _record(found, "item", Sample(rate, cpu, sink_cpu))
    source = folder / f"own-{round_no}.db"
    fill.pending_events(source, f"o{round_no}", events)
    before = task_cpu_seconds(ours_pid)
    count, rate, cpu = relay_rate(source, ours, batch=False, own=True)
    sink_cpu = 1e6 * (task_cpu_seconds(ours_pid) - before) / count
    _record(found, "item_own", Sample(rate, cpu, sink_cpu))
    seconds = events / 2500  # about as long as the relay's run
    marks = folder / "zero-code-marks.db"
    sample = zero_code(lambda: raw_exchange(raw), marks, seconds, raw_pid, behind=False)
    _record(found, "zero", sample)
    _record(found, "guarded", guarded_handover(folder, url, pid, seconds, f"g{round_no}"))
    # Pinned on one CPU as well: unpinned, a hand-over swings with where the scheduler puts
    # its two processes (item 61), and the two floors need not land alike.
    with placed("together", raw_pid) as pinned:
        if pinned:
            sample = zero_code(lambda: raw_exchange(raw), marks, seconds, raw_pid, behind=False)
            _record(found, "zero_together", sample)
    with placed("together", pid) as pinned:
        if pinned:
            sample = guarded_handover(folder, url, pid, seconds, f"gt{round_no}")
            _record(found, "guarded_together", sample)
    sample = zero_code(lambda: raw_exchange(raw), marks, seconds, raw_pid, behind=True)
    _record(found, "zero_behind", sample)
    sample = guarded_handover(folder, url, pid, seconds, f"gb{round_no}", behind=True)
    _record(found, "guarded_behind", sample)
    lab = [fill.lab_event(f"p{round_no}-{n}", f"s{n % 64}", 1) for n in range(events)]
    for kind in ("new", "dup"):
        wall, cpu, sink_cpu = send_each(lab, f"{ours}/events", ours_pid, task_cpu_seconds)
        _record(found, f"sink_{kind}", Sample(events / wall, 1e6 * cpu / events,
                                              1e6 * sink_cpu / events))  # fmt: skip
    fresh, again = sink_round_trips(url, pid, seconds, f"t{round_no}")
    _record(found, "guarded_new", fresh)
    _record(found, "guarded_dup", again)
    fresh, again = sink_round_trips(*loop, seconds, f"l{round_no}")
    _record(found, "loop_new", fresh)
    _record(found, "loop_dup", again)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guarded_pair", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=1500)
    args = parser.parse_args(argv)
    found: dict[str, list[float]] = defaultdict(list)
    rawserver = Path(__file__).with_name("rawserver.py")
    with scratch("guarded-pair") as folder:
        ours = start_sink(folder, "sink")
        try:
            with (
                start_listener(
                    [sys.executable, str(rawserver), "--commit", str(folder / "raw-sink.db")]
                ) as raw,
                guarded_sink(folder) as guarded,
                guarded_sink(folder, "guarded_loop_sink") as loop,
            ):
                sinks = Sinks(
                    (ours.base_url, ours.process.pid),
                    (raw.base_url, raw.process.pid),
                    guarded,
                    loop,
                )
                for round_no in range(args.rounds):
                    one_round(found, folder, sinks, round_no, args.events)
                    print(f"round {round_no + 1} of {args.rounds} done", flush=True)
        finally:
            ours.stop()
    report(found)
    return 0


def _median(found: dict[str, list[float]], key: str) -> float:
    return statistics.median(found[key])


def report(found: dict[str, list[float]]) -> None:
    print("| what | median | relay/client CPU µs/event | sink CPU µs/event |")
    print("|---|---|---|---|")
    for key, words, unit in ROWS:
        if not found[key]:
            continue  # a placement this machine cannot make
        rate = _median(found, key)
        value = f"{rate:,.0f}/s" if unit == "/s" else f"{1e6 / rate:,.0f} µs"
        relay, sink = _median(found, key + ".relay_cpu"), _median(found, key + ".sink_cpu")
        print(f"| {words} | {value} | {relay:,.0f} | {sink:,.0f} |")
    zero, guarded = _median(found, "zero"), _median(found, "guarded")
    behind, guarded_behind = _median(found, "zero_behind"), _median(found, "guarded_behind")
    print(f"guarded / zero-code {guarded / zero:.2f}; marks behind: {guarded_behind / behind:.2f}")
    if found["zero_together"] and found["guarded_together"]:
        pinned = _median(found, "guarded_together") / _median(found, "zero_together")
        print(f"guarded / zero-code, both on one CPU: {pinned:.2f}")
    for key in ("item", "item_own"):
        item = _median(found, key)
        print(f"{key}: / zero-code {item / zero:.2f}, / guarded {item / guarded:.2f}")
    for kind in ("new", "dup"):
        ours, floor = _median(found, f"sink_{kind}"), _median(found, f"guarded_{kind}")
        print(f"serve sink {kind} / guarded sink {kind}: {floor / ours:.2f}x the time")
        loop = _median(found, f"loop_{kind}")
        print(f"  split: guarded loop / guarded {floor / loop:.2f}x (the service's duties), "
              f"serve sink / guarded loop {loop / ours:.2f}x (ackledger's own)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
