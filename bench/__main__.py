"""``python -m bench --quick|--full [--only SECTION,...]``: measure, then write docs/.

The figures go to docs/benchmarks.json by section (``--only`` replaces the sections it names
and keeps the others), and docs/benchmarks.md is rendered from that file by ``bench.report``
(``python -m bench --render`` renders it again without measuring). ``--against REV`` measures
the sections this tree shares with revision REV in both trees, one right after the other, and
stores which figures moved (bench/against.py); the sections stored before are kept.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import (
    against,
    asgiload,
    asyncpublish,
    brokers,
    drills,
    floors,
    growth,
    idemmiddleware,
    idempotent,
    ledger,
    machine,
    moved,
    ormconsume,
    postgres,
    relay,
    report,
    sinkload,
    steps,
    store,
)
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
    # @ledger.idempotent against Powertools + Redis: SQLite, PostgreSQL, using_arg.
    "idempotent": idempotent.measure,
    "postgres": postgres.measure,
    "drills": drills.measure,
    # PostgreSQL outbox -> RabbitMQ / NATS against faststream-outbox and the raw floors.
    "brokers": brokers.measure,
    # The user's own code: an ORM handler under `consume --session` against a hand-written one.
    "orm-consume": ormconsume.measure,
    # Outbox.publish_async in the user's AsyncSession against the session's plain row.
    "publish-async": asyncpublish.measure,
    # receive_async through Inbox.asgi() in the user's app under uvicorn against serve sink.
    "asgi": asgiload.measure,
    # IdempotencyMiddleware: a replay and a first request against the bare endpoint.
    "idem-middleware": idemmiddleware.measure,
}


def measure(
    chosen: list[str],
    plan: Plan,
    stored: dict[str, dict[str, Any]],
    *,
    command: str,
    about: dict[str, str],
    save: Callable[[dict[str, dict[str, Any]]], None] | None,
) -> Results:
    """Runs the ``chosen`` sections into ``stored`` (replacing those, keeping the others),
    calling ``save`` after each; returns every figure, the kept sections' included."""
    # Sections read figures of the sections before them (the floors above all): a partial run
    # starts from what is stored, and stores only what its own sections add.
    kept = {name: part for name, part in stored.items() if name not in chosen}
    results = store.combined(kept, list(SECTIONS))
    for name in chosen:
        before = store.snapshot(results)
        started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        load_before, section_clock = machine.load_line(), time.perf_counter()
        SECTIONS[name](plan, results)
        stored[name] = {
            "plan": plan.name,
            "command": command,
            "started": started,
            "seconds": round(time.perf_counter() - section_clock, 1),
            "machine": {**about, "load_before": load_before, "load_after": machine.load_line()},
            **store.section_part(results, before),
        }
        if save is not None:
            save(stored)  # after each section: an interrupted run keeps what it measured
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--quick", action="store_true", help="every workload, small")
    size.add_argument("--full", action="store_true", help="every workload, full size")
    size.add_argument(
        "--render", action="store_true", help="write docs/benchmarks.md from the stored figures"
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated sections ({', '.join(SECTIONS)})"
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="print the figures, leave docs/ alone"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the figures this run measured to PATH"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="measure the sections shared with git revision REV in both trees, alternately, "
        f"and list the figures that lost more than {moved.THRESHOLD * 100:.0f}%% "
        "(REV gets a worktree and venv of its own under .bench-against/)",
    )
    args = parser.parse_args(argv)
    if args.render:
        if args.against:
            parser.error("--against measures: use it with --quick or --full")
        print(f"wrote {report.write(store.load(), list(SECTIONS), store.load_against())}")
        return 0
    plan = QUICK if args.quick else FULL
    chosen = [name for name in args.only.split(",") if name] or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"--only: unknown section {unknown[0]!r}")
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    about = machine.describe()
    print(f"{command}: {about['cores']} cores, Python {about['python']}, SQLite {about['sqlite']}")
    if args.against:
        flag = "--quick" if args.quick else "--full"
        only = [name for name in args.only.split(",") if name]
        comparison = against.compare(args.against, flag, only, command=command.strip(), about=about)
        print("\n".join(against.summary(comparison)))
        if not args.no_docs:
            store.save_against(comparison)
            print(f"wrote {report.write(store.load(), list(SECTIONS), comparison)}")
        return 0
    stored = {} if args.no_docs else store.load()
    clock = time.perf_counter()
    results = measure(chosen, plan, stored, command=command.strip(), about=about,
                      save=None if args.no_docs else store.save)  # fmt: skip
    print(f"measured in {time.perf_counter() - clock:.0f} s")
    if args.json:
        store.write_run(stored, chosen, Path(args.json))
    for key, refused in results.refused.items():
        print(f"  REFUSED {refused['label']} ({key}): {refused['why']}")
    if not args.no_docs:
        print(f"wrote {report.write(stored, list(SECTIONS), store.load_against())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
