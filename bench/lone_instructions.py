"""``python -m bench.lone_instructions [--handlers] [--events N] [--src DIR]``: instructions
per lone event of ``serve sink`` under valgrind, a new event and a duplicate (bench/CHANGES.md
item 104).

``bench.guarded_instructions.sink_per_event`` measures the reference handler's lab events;
this measures those too (the default) or, with ``--handlers``, the generic workload's events
(``bench.fill.generic``, about 1 KiB each) served with ``serve sink --handlers
bench.handlers:HANDLERS``: a user's handler, one insert of its own in the inbox's
transaction. One event per request over one kept socket, so every event is a lone group.
Each figure is the difference of two runs, N and 2N events (and N events re-sent N and 2N
times), divided by N, so start-up and imports cancel out. ``--src`` points the sink at
another tree's ``src`` (a ``git archive`` of a commit) for a before -> after on one bench.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ackledger.envelope import canonical_json

from .fill import SOURCE as GENERIC_SOURCE
from .fill import generic
from .guarded_instructions import counted_sink
from .guarded_relay import SOURCE as LAB_SOURCE
from .guarded_relay import lab_text

_ROOT = str(Path(__file__).resolve().parent.parent)
_HANDLERS = "bench.handlers:HANDLERS"


def _texts(user: bool, count: int) -> list[tuple[str, str, str]]:
    """(id, source, body) of ``count`` distinct events of the chosen workload."""
    if not user:
        return [(f"e-{n}", LAB_SOURCE, lab_text(f"e-{n}", n)) for n in range(count)]
    found = []
    for number in range(count):
        event = generic("g", number)
        found.append((event["id"], GENERIC_SOURCE, canonical_json(event)))
    return found


def _life(src: str, user: bool, folder: Path, new: int, dup: int) -> int:
    """Instructions of one ``serve sink`` under valgrind answering ``new`` new events, then
    ``dup`` re-sends of them; it exits on SIGTERM."""
    command = [sys.executable, "-m", "ackledger.cli", "serve", "sink", "--port", "0"]
    command += ["--db", str(folder / f"{int(user)}-{new}-{dup}.db")]
    if user:
        command += ["--handlers", _HANDLERS]
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{_ROOT}"}
    texts = _texts(user, new)
    sends = (texts[n] for n in [*range(new), *(n % new for n in range(dup))])
    return counted_sink(command, env, sends, stop=True, what="the sink")


def per_event(src: str, user: bool, events: int) -> tuple[float, float]:
    """(instructions per new event, per duplicate)."""
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-lone-") as name:
        folder = Path(name)
        one, two = (_life(src, user, folder, n * events, 0) for n in (1, 2))
        again, twice = (_life(src, user, folder, events, n * events) for n in (1, 2))
    return (two - one) / events, (twice - again) / events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lone_instructions", description=__doc__)
    parser.add_argument("--events", type=int, default=300, help="N (300): runs N and 2N")
    parser.add_argument("--handlers", action="store_true", help="the generic workload")
    parser.add_argument("--src", default=str(Path(_ROOT) / "src"), help="the tree's src")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    new, dup = per_event(args.src, args.handlers, args.events)
    words = "a user's handler" if args.handlers else "the reference handler"
    print(f"{words}: {new:,.0f} per new event, {dup:,.0f} per duplicate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
