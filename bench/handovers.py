"""The hand-over floors of one repetition, side by side:

- ``floor.handover``: the zero-code hand-over (a raw round trip to ``rawserver.py --commit``
  and a one-row FULL commit on each side);
- ``floor.handover_behind``: the same with each mark committed on a second thread while the
  next event travels (at most one mark in flight);
- ``floor.handover_guarded`` (and ``_behind``): the guarded hand-over, both sides doing the
  contract's work for one event (``guarded_relay.py``, ``guarded_sink.py``);
- ``floor.guarded_new`` / ``floor.guarded_dup``: one round trip to the guarded sink from a
  kept raw socket with a new event, and with the same event again;
- ``floor.guarded_loop_new`` / ``floor.guarded_loop_dup``: the same to the guarded loop sink
  (``guarded_loop_sink.py``: the same rules, served with the service's duties: an event
  loop, the limits, pipelining, group commit).

Each with both processes' CPU per event (this process's ``process_time``, the sink's from
``/proc``): on a shared machine the steadier figure, and the fsync of a FULL commit costs CPU
on this VM too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .common import Results
from .guarded_relay import Behind, Sample, guarded_handover, run_for, sink_round_trips
from .rawserver import one_row_committer


@contextmanager
def guarded_sink(
    folder: Path, module: str = "guarded_sink", *options: str
) -> Iterator[tuple[str, int]]:
    """A guarded sink process (``module``: ``guarded_sink`` or ``guarded_loop_sink``, its
    database ``folder/<module>.db`` but the first's, kept as it was): (its base URL, its pid)."""
    from ackledger._dev.procs import start_listener

    name = "guarded-sink.db" if module == "guarded_sink" else f"{module}.db"
    command = [sys.executable, "-m", f"bench.{module}", "--db", str(folder / name), *options]
    # The repository's root, so that ``bench`` imports wherever the caller runs from.
    root = str(Path(__file__).resolve().parent.parent)
    with start_listener(command, env={"PYTHONPATH": root}) as sink:
        yield sink.base_url, sink.process.pid


#: Opens a kept raw socket to the zero-code sink: (one round trip, close). The raw server
#: serves one connection at a time, so each run opens its own and closes it.
Connect = Callable[[], tuple[Callable[[], None], Callable[[], None]]]


def zero_code(connect: Connect, marks: Path, seconds: float, pid: int, *, behind: bool) -> Sample:
    """The zero-code hand-over: its marks now, or behind the next send."""
    exchange, close = connect()
    later = Behind() if behind else None
    try:
        if later is None:
            mark = one_row_committer(str(marks))

            def now() -> None:
                exchange()
                mark()

            return run_for(now, seconds, pid)
        commit = one_row_committer(str(marks), any_thread=True)

        def behind_it() -> None:
            exchange()
            later.hand(commit)

        sample = run_for(behind_it, seconds, pid)
        later.drain()
        return sample
    finally:
        if later is not None:
            later.close()
        close()


def _add(results: Results, key: str, words: str, sample: Sample, *, per_trip: bool = False) -> None:
    if per_trip:
        results.add(key, words, "µs", 1e6 / sample.rate)
    else:
        results.add(key, words, "/s", sample.rate)
    side = "client" if per_trip else "relay"
    results.add(f"{key}_{side}_cpu", f"{words}: the {side}'s CPU per event", "µs", sample.relay_cpu)
    results.add(f"{key}_sink_cpu", f"{words}: the sink's CPU per event", "µs", sample.sink_cpu)


def measure_rep(
    results: Results,
    *,
    folder: Path,
    seconds: float,
    rep: int,
    raw: tuple[Connect, int],
    guarded: tuple[str, int],
    guarded_loop: tuple[str, int] | None = None,
) -> None:
    """One repetition of every hand-over floor; ``raw`` is (how to connect to the zero-code
    sink, its pid), ``guarded`` the guarded sink's (URL, pid), ``guarded_loop`` the guarded
    loop sink's."""
    connect, raw_pid = raw
    url, pid = guarded
    marks = folder / "handover-source.db"
    _add(
        results,
        "floor.handover",
        "zero-code hand-over: raw socket round trip + a one-row FULL commit on each side",
        zero_code(connect, marks, seconds, raw_pid, behind=False),
    )
    _add(
        results,
        "floor.handover_behind",
        "zero-code hand-over, each mark committed on a second thread while the next event travels",
        zero_code(connect, marks, seconds, raw_pid, behind=True),
    )
    _add(
        results,
        "floor.handover_guarded",
        "guarded hand-over: both sides do the contract's "
        "work for one event (bare sqlite3, raw socket)",
        guarded_handover(folder, url, pid, seconds, f"g{rep}"),
    )
    _add(
        results,
        "floor.handover_guarded_behind",
        "guarded hand-over, each mark committed on a second thread while the next event travels",
        guarded_handover(folder, url, pid, seconds, f"gb{rep}", behind=True),
    )
    fresh, again = sink_round_trips(url, pid, seconds, f"t{rep}")
    _add(
        results,
        "floor.guarded_new",
        "guarded sink, a new event: round trip from a raw socket, ACK checked",
        fresh,
        per_trip=True,
    )
    _add(results, "floor.guarded_dup", "guarded sink, the same event again (a duplicate)",
         again, per_trip=True)  # fmt: skip
    if guarded_loop is None:
        return
    fresh, again = sink_round_trips(*guarded_loop, seconds, f"l{rep}")
    _add(results, "floor.guarded_loop_new",
         "guarded loop sink (event loop, limits, group commit), a new event: round trip",
         fresh, per_trip=True)  # fmt: skip
    _add(results, "floor.guarded_loop_dup", "guarded loop sink, a duplicate", again,
         per_trip=True)  # fmt: skip


#: What ``floors.measure`` prints of these, in this order.
PRINTED = (
    "floor.handover",
    "floor.handover_behind",
    "floor.handover_guarded",
    "floor.handover_guarded_behind",
    "floor.guarded_new",
    "floor.guarded_dup",
    "floor.guarded_loop_new",
    "floor.guarded_loop_dup",
)


def print_figures(results: Results) -> None:
    for key in PRINTED:
        figure = results.figures.get(key)
        if figure is None:
            continue
        side = "client" if figure.unit == "µs" else "relay"
        relay = results.get(f"{key}_{side}_cpu") or 0.0
        sink = results.get(f"{key}_sink_cpu") or 0.0
        print(
            f"  {figure.label}: {figure.median:,.0f}{' ' if figure.unit == 'µs' else ''}"
            f"{figure.unit} "
            f"(CPU per event: {side} {relay:,.0f} µs, sink {sink:,.0f} µs)",
            flush=True,
        )
