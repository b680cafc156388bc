"""``python -m bench.relay_instructions``: the relay's instructions per event, under valgrind.

On the shared 2-core machine the relay's CPU time per event moved 30% between rounds of the
same code (bench/CHANGES.md item 77), more than the gaps to v1 in question. The number of
instructions the relay process executes per event barely moves (under 1% between runs): it
counts the code's own work in user space, though not the system calls' (the fsync, the
socket's) nor the cost of a cold cache, so it complements ``bench.relay_cpu``, it does not
replace it.

Each variant (``NAME=SRC`` or ``current``, like ``bench.relay_cpu``'s) drains a filled outbox
into its own ``serve sink`` twice, N and 2N events, in a child process run by ``valgrind
--tool=callgrind``; (instructions of the 2N drain - those of the N drain) / N is the figure,
so the interpreter's start-up and the imports cancel out. The ways are ``bench.relay_cpu``'s
in-process ones: ``inproc``, ``own``, ``item``, ``itemlast``, ``itemown``, and ``itembehind``
(``item`` with each mark committed behind the next send; the marking thread's instructions
count too); ``daemon`` and ``daemonpipe`` run the relay daemon's loop (``relay.loop.Relay``
on the whole outbox with its own HTTP sender, per item; ``daemonpipe`` with ``--pipeline``)
in the same process until the drain's last event is acknowledged. Needs valgrind::

    python -m bench.relay_instructions --ways inproc,own v1=/work/wt/v1/src main=../main/src current
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WAYS = ("inproc", "own", "item", "itemlast", "itemown", "itembehind", "daemon", "daemonpipe")
_BENCH = str(Path(__file__).resolve().parent.parent)

_DRAIN = """
import sys
import ackledger
from ackledger import Outbox
from ackledger.source.dispatch import dispatch, dispatch_batch
from ackledger.wire.http import close_connections, send_http, send_http_batch

way, target, url = sys.argv[1:4]
with Outbox(target, synchronous="FULL") as outbox:
    if way == "inproc":
        def send_batch(items):
            return send_http_batch(items, url + "/events/batch")
        while dispatch_batch(outbox, send_batch, 16):
            pass
    elif way == "own":
        wire = ackledger.sender(url + "/events")
        while dispatch_batch(outbox, wire.send_batch, 16):
            pass
        wire.close()
    elif way == "itembehind":
        from ackledger.source.marking import MarksBehind
        def send(item):
            return send_http(item, url + "/events")
        with Outbox(target, synchronous="FULL") as marker:
            marks = MarksBehind(outbox, marker)
            while dispatch(outbox, send, 16, behind=marks):
                pass
            marks.close()
    elif way in ("daemon", "daemonpipe"):
        # ``ackledger relay [--pipeline]`` per item, minus its start-up: the loop stops once
        # the last event is acknowledged (its mark still lands before ``run`` returns).
        from ackledger.relay.loop import Relay, StopFlag
        from ackledger.relay.pickers import WholeOutbox
        from ackledger.relay.settings import RelaySettings
        pipeline = way == "daemonpipe"
        last = outbox.stats()["pending"]
        stop, acked = StopFlag(), [0]
        def counted(event_id):
            acked[0] += 1
            if acked[0] == last:
                stop.set()
        settings = RelaySettings(url + "/events", pipeline=pipeline)
        with Outbox(target, synchronous="FULL") as marker:
            relay = Relay(
                WholeOutbox(outbox, settings, marker if pipeline else None),
                stop=stop, log=lambda line: None, after_delivery=counted,
            )
            relay.run()
    elif way == "itemown":
        wire = ackledger.sender(url + "/events")
        while dispatch(outbox, wire.send, 16):
            pass
        wire.close()
    else:
        def send(item):
            return send_http(item, url + "/events")
        sync = "last" if way == "itemlast" else "each"
        while dispatch(outbox, send, 16, mark_sync=sync):
            pass
    close_connections()
    if outbox.pending(limit=1):
        raise SystemExit("the drain left events pending")
"""

_FILL = """
import sys
from bench.relay_cpu import _fill
_fill(sys.argv[1], int(sys.argv[2]), sys.argv[3])
"""

_SINK = """
import sys
from pathlib import Path
from ackledger._dev.procs import start_service
extra = [] if sys.argv[2] == "lab" else ["--handlers", "bench.handlers:HANDLERS"]
sink = start_service(
    ["serve", "sink", "--db", sys.argv[1], "--port", "0", *extra],
    stderr_path=Path(sys.argv[1] + ".log"),
)
print(sink.base_url, flush=True)
sys.stdin.read()
sink.stop()
"""


def _env(src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{src}{os.pathsep}{_BENCH}" if src else _BENCH
    return env


def _instructions(src: str | None, way: str, target: str, url: str) -> int:
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-c", _DRAIN, way, target, url,
    ]  # fmt: skip
    done = subprocess.run(
        command, env=_env(src), cwd=_BENCH, capture_output=True, text=True, check=False
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"the drain failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_event(src: str | None, way: str, events: int, workload: str) -> float:
    """Instructions per event of the relay process draining ``events`` events one ``way``."""
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-ir-") as folder:
        sink = subprocess.Popen(
            [sys.executable, "-c", _SINK, f"{folder}/sink.db", workload],
            env=_env(src), cwd=_BENCH, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert sink.stdout is not None and sink.stdin is not None
            url = sink.stdout.readline().strip()
            counts = []
            for count in (events, 2 * events):
                target = f"{folder}/outbox-{count}.db"
                subprocess.run(
                    [sys.executable, "-c", _FILL, target, str(count), workload],
                    env=_env(src), cwd=_BENCH, check=True,
                )  # fmt: skip
                counts.append(_instructions(src, way, target, url))
            sink.stdin.close()
        finally:
            sink.wait(60)
    return (counts[1] - counts[0]) / events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_instructions", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000, help="N (1000): drains N and 2N")
    parser.add_argument("--ways", default="inproc,own", help=f"of {', '.join(WAYS)}")
    parser.add_argument("--workload", choices=("lab", "generic"), default="lab")
    parser.add_argument("variants", nargs="*", default=["current"], help="NAME=SRC or current")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    ways = [way for way in args.ways.split(",") if way]
    if set(ways) - set(WAYS):
        parser.error(f"--ways: of {', '.join(WAYS)}")
    variants = [(v, None) if v == "current" else tuple(v.split("=", 1)) for v in args.variants]
    table: dict[tuple[str, str], float] = {}
    for way in ways:
        events = args.events if way in ("inproc", "own") else max(100, args.events // 4)
        for name, src in variants:
            table[(name, way)] = per_event(src, way, events, args.workload)
            print(f"{name} {way}: {table[(name, way)]:,.0f} instructions per event", flush=True)
    names = [name for name, _ in variants]
    print("\n| way: instructions per event | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for way in ways:
        print(f"| {way} | " + " | ".join(f"{table[(n, way)]:,.0f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
