"""``python -m bench --quick|--full [--only SECTION,...]``: measure, then write docs/."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Callable

from . import (
    brokers,
    drills,
    floors,
    growth,
    ledger,
    machine,
    postgres,
    relay,
    report,
    sinkload,
    steps,
)
from .brokers import docs as brokers_docs
from .common import FULL, QUICK, Plan, Results

Section = Callable[[Plan, Results], None]

# Floors first: every ratio in the report divides by them.
SECTIONS: dict[str, Section] = {
    "floors": floors.measure,
    "accept": relay.measure_accept,
    "relay": relay.measure_relay,
    "sink": sinkload.measure,
    "steps": steps.measure,
    "growth": growth.measure,
    "ledger": ledger.measure_in_process,
    "ledger-http": ledger.measure_http,
    "postgres": postgres.measure,
    "drills": drills.measure,
    # PostgreSQL outbox -> RabbitMQ / NATS against faststream-outbox and the raw floors; its
    # own section of docs/ (bench/brokers/docs.py), also runnable alone: python -m bench.brokers
    "brokers": brokers.measure,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--quick", action="store_true", help="every workload, small (< 2 minutes)")
    size.add_argument("--full", action="store_true", help="every workload, full size")
    parser.add_argument(
        "--only", default="", help=f"comma-separated sections ({', '.join(SECTIONS)})"
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="print the figures, leave docs/ alone"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    chosen = [name for name in args.only.split(",") if name] or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"--only: unknown section {unknown[0]!r}")
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = machine.describe()
    print(f"{command}: {about['cores']} cores, Python {about['python']}, SQLite {about['sqlite']}")
    results = Results()
    clock = time.perf_counter()
    for name in chosen:
        SECTIONS[name](plan, results)
    took = time.perf_counter() - clock
    load = os.getloadavg()
    about["load_after"] = f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    print(f"measured in {took:.0f} s")
    for target in report.targets(results, plan):
        if target.value is not None:
            verdict = {True: "met", False: "NOT met", None: "-"}[target.met]
            print(f"  {target.label}: {target.value:,.2f} (target {target.goal:,}) {verdict}")
    for line in report.information(results):
        if line.value is not None:
            print(f"  {line.label}: {line.value:,.2f} (information)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as dump:
            json.dump([f.as_dict() for f in results.figures.values()], dump, indent=1)
    if not args.no_docs:
        out = report.write(results, plan, about, command=command, started=started, took=took)
        if "brokers" in chosen:
            brokers_docs.write(results, about, command=command, started=started, took=took)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
