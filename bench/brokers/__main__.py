"""``python -m bench.brokers [--full] [--events N] [--no-docs]``: only the broker benchmark.

Every timed run of a batch relay (ours, and faststream-outbox at its best) drains 20,000 events
by default; faststream-outbox never makes fewer than 10 fetch rounds per worker.

Writes its own section of docs/benchmarks.md, its key of docs/benchmarks.json and
docs/img/brokers.png, and leaves the rest of those files as they are.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

from .. import machine
from ..common import FULL, QUICK, Results
from . import measure
from .docs import write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.brokers", description=__doc__)
    parser.add_argument("--full", action="store_true", help="2 repetitions, and the per-item "
                        "relays over --events too")  # fmt: skip
    parser.add_argument("--events", type=int, help="events per timed run (default 20,000; the "
                        "per-item relays at most 4,000 without --full; the peer never fewer than "
                        "10 fetch rounds per worker)")  # fmt: skip
    parser.add_argument("--no-docs", action="store_true", help="print the figures only")
    args = parser.parse_args(argv)
    if args.events is not None and not 100 <= args.events <= 1_000_000:
        parser.error("--events: between 100 and 1,000,000")
    plan = FULL if args.full else QUICK
    command = "python -m bench.brokers " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = machine.describe()
    load = os.getloadavg()
    about["load_before"] = f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    results = Results()
    clock = time.perf_counter()
    measure(plan, results, args.events)
    took = time.perf_counter() - clock
    load = os.getloadavg()
    about["load_after"] = f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    print(f"measured in {took:.0f} s")
    if not args.no_docs:
        print(f"wrote {write(results, about, command=command.strip(), started=started, took=took)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
