"""``python -m bench.broker_cpu``: CPU time per event of one ``ackledger relay`` to a broker.

On a machine other work loads, a relay's wall-clock rate says as much about the neighbours as
about the relay; the CPU its own process spends per event (user + system from
``/proc/PID/stat`` at the last mark, less what a relay spends starting on an empty outbox)
swings far less. Each run: a fresh PostgreSQL outbox of ``--events`` lab events and a fresh
RabbitMQ route (or NATS stream), then one relay draining it. ``--profile FILE``: py-spy's
raw record of the first run's relay.

    python -m bench.broker_cpu --events 20000 --runs 3 --flags=--batch
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import fill
from .brokers import _event, jetstream, ours, rabbit
from .common import cpu_seconds, marks_rate
from .postgres import database


@contextmanager
def _target(broker: str, tag: str) -> Iterator[str]:
    if broker == "nats":
        with jetstream.stream(tag) as stream:
            yield stream.url()
    else:
        with rabbit.route(tag) as where:
            yield where.url()


def _py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def startup_cpu(broker: str, flags: list[str], settle_s: float = 2.0) -> float:
    """CPU seconds a relay spends starting (imports, connections) and idling on an empty
    outbox for ``settle_s``: subtracted from a run's total."""
    with (
        database() as source,
        _target(broker, "idle") as url,
        ours.relay(source, url, *flags) as process,
    ):
        time.sleep(settle_s)
        return cpu_seconds(process.pid)


def one_run(
    broker: str, events: int, flags: list[str], start: float, profile: str | None
) -> tuple[float, float]:
    """(CPU microseconds per event past start-up, events/s from the first mark to the last)."""
    with database() as source, _target(broker, "cpu") as url:
        fill.pending_events(source, "cpu", events, _event)
        with ours.reader(source) as query, ours.relay(source, url, *flags) as process:
            spy = None
            if profile is not None:
                spy = subprocess.Popen(
                    [_py_spy(), "record", "-r", "500", "-f", "raw", "-o", profile,
                     "--pid", str(process.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            value = marks_rate(query, events, timeout=900)
            used = cpu_seconds(process.pid) - start
            if spy is not None:
                spy.send_signal(2)
                spy.wait(timeout=60)
    return used / events * 1e6, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_cpu", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--broker", choices=("rabbit", "nats"), default="rabbit")
    parser.add_argument("--flags", default="--batch", help="the relay's flags, space-separated")
    parser.add_argument("--profile", help="py-spy raw output file (the first run only)")
    args = parser.parse_args(argv)
    flags = args.flags.split()
    start = startup_cpu(args.broker, flags)
    print(f"start-up and 2 s idle: {start * 1e3:.0f} ms CPU", flush=True)
    for run in range(args.runs):
        profile = args.profile if run == 0 else None
        cpu, value = one_run(args.broker, args.events, flags, start, profile)
        shown = f"{args.broker} {' '.join(flags)}: {cpu:.0f} us CPU/event, {value:,.0f}/s"
        print(shown, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
