"""``python -m bench.guarded_instructions [--events N]``: instructions per event, under
valgrind, of each side of the guarded hand-over against ackledger's (bench/CHANGES.md 83).

Wall clock and CPU time swing with the machine's load and with where the scheduler puts the
two processes; the instructions a process runs in user space barely move. They leave out
what the system calls cost (the fsync, the socket's) and cold caches, so they split only the
code's own work: the sink's (``serve sink`` against ``bench/guarded_sink.py`` and
``bench/guarded_loop_sink.py``, the same rules with the service's duties), for a new event
and for a duplicate, and the relay's (``dispatch`` + ``send_http``, and the relay's own
sender, against ``bench/guarded_relay.py``). Each figure is the difference of two runs, N and
2N events, divided by N, so start-up and imports cancel out. Needs valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .guarded_relay import SOURCE, Wire, fill_outbox, lab_text
from .handovers import guarded_sink
from .relay_instructions import per_event

_ROOT = str(Path(__file__).resolve().parent.parent)
_CALLGRIND = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
_LISTENING = re.compile(r"listening on http://([\d.]+):(\d+)")

#: The floors' sinks by kind (``ours`` is ``serve sink``).
_FLOORS = {"guarded": "guarded_sink", "loop": "guarded_loop_sink"}

_RELAY = """
import sys
from bench.guarded_relay import GuardedRelay
relay = GuardedRelay(sys.argv[1], sys.argv[2])
for _ in range(int(sys.argv[3])):
    relay.step()
relay.close()
"""


def _collected(stderr: str) -> int:
    found = re.search(r"Collected : (\d+)", stderr)
    if found is None:
        raise SystemExit(f"valgrind reported no count:\n{stderr[-2000:]}")
    return int(found.group(1))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": _ROOT}


def sink_life(kind: str, folder: Path, new: int, dup: int) -> int:
    """Instructions of one sink process under valgrind that answers ``new`` new events and
    then ``dup`` re-sends of them, and exits."""
    db = str(folder / f"{kind}-{new}-{dup}.db")
    if kind in _FLOORS:
        command = [sys.executable, "-m", f"bench.{_FLOORS[kind]}", "--db", db, "--once"]
    elif kind != "ours":
        raise ValueError(f"no sink {kind!r}: guarded, loop or ours")
    else:
        command = [sys.executable, "-m", "ackledger.cli", "serve", "sink", "--db", db]
        command += ["--port", "0"]
    sends = [*range(new), *(n % new for n in range(dup))]
    texts = ((f"e-{n}", SOURCE, lab_text(f"e-{n}", n)) for n in sends)
    # The guarded sinks end with their connection (--once); serve sink on SIGTERM.
    return counted_sink(command, _env(), texts, stop=kind == "ours", what=f"the {kind} sink")


def counted_sink(
    command: list[str],
    env: dict[str, str],
    sends: Iterable[tuple[str, str, str]],
    *,
    stop: bool,
    what: str,
) -> int:
    """Instructions of the sink ``command`` run under valgrind, sent each (id, source, text)
    of ``sends`` in turn over one kept connection; ``stop``: it exits on SIGTERM, else when
    its connection closes."""
    process = subprocess.Popen(
        [*_CALLGRIND, *command], env=env, cwd=_ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        found = None
        while found is None:
            line = process.stdout.readline()
            if not line:
                raise SystemExit(f"{what} did not start")
            found = _LISTENING.search(line)
        wire = Wire(found.group(1), int(found.group(2)))
        for sent in sends:
            wire.send(*sent)
        wire.close()
        if stop:
            process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return _collected(stderr)


def sink_per_event(kind: str, events: int) -> tuple[float, float]:
    """(instructions per new event, per duplicate) of a sink ``kind``."""
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-gir-") as name:
        folder = Path(name)
        one, two = sink_life(kind, folder, events, 0), sink_life(kind, folder, 2 * events, 0)
        again, twice = (sink_life(kind, folder, events, n * events) for n in (1, 2))
    return (two - one) / events, (twice - again) / events


def guarded_relay_per_event(events: int) -> float:
    """Instructions per event of the guarded relay, draining into a guarded sink."""
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-gir-") as name:
        folder = Path(name)
        counts = []
        with guarded_sink(folder) as (url, _):
            for count in (events, 2 * events):
                outbox = folder / f"outbox-{count}.db"
                fill_outbox(outbox, f"r{count}", count)
                command = [*_CALLGRIND, sys.executable, "-c", _RELAY, str(outbox), url, str(count)]
                done = subprocess.run(
                    command, env=_env(), cwd=_ROOT, capture_output=True, text=True, check=False
                )
                if done.returncode:
                    raise SystemExit(f"the guarded relay failed:\n{done.stderr[-2000:]}")
                counts.append(_collected(done.stderr))
    return (counts[1] - counts[0]) / events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.guarded_instructions", description=__doc__
    )
    parser.add_argument("--events", type=int, default=300, help="N (300): runs N and 2N")
    parser.add_argument("--sinks-only", action="store_true", help="leave out the relays")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    rows: list[tuple[str, float]] = []
    for kind, words in (("guarded", "guarded sink"), ("loop", "guarded loop sink"),
                        ("ours", "serve sink")):  # fmt: skip
        new, dup = sink_per_event(kind, args.events)
        rows += [(f"{words}, a new event", new), (f"{words}, a duplicate", dup)]
        print(f"{words}: {new:,.0f} per new event, {dup:,.0f} per duplicate", flush=True)
    if not args.sinks_only:
        rows.append(("guarded relay", guarded_relay_per_event(args.events)))
    for way, words in (("item", "per-item relay, dispatch + send_http"),
                       ("itemown", "per-item relay, own sender")):  # fmt: skip
        if args.sinks_only:
            break
        rows.append((words, per_event(None, way, args.events, "lab")))
    print("\n| process, per event | instructions |\n|---|---|")
    for words, count in rows:
        print(f"| {words} | {count:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
