"""``@ledger.idempotent`` against Powertools for AWS Lambda's ``@idempotent_function`` with its
Redis persistence layer (on the local Redis, which keeps nothing on disk), in one process, on
one workload: N calls, every other one a repeat of an earlier key (``bench.ledger.workload``).

The suite's section ``idempotent`` (``python -m bench --quick --only idempotent``) measures, in
one run: the peer; ours on SQLite with synchronous=FULL and NORMAL; ours on PostgreSQL; and ours
with ``using_arg``, where the key and its result are written with the caller's connection and
commit with the caller's own commit (SQLite FULL and PostgreSQL). Each is a ratio of the peer.

    python -m bench.idempotent [--calls N]

prints the same figures without touching docs/. Ours holds each new key: a claim, the function,
a durable completion (two commits, or the caller's one with ``using_arg``; on SQLite the claim
skips the fsync, on PostgreSQL both are durable); Powertools writes its in-progress and
completed records to Redis (two round trips, nothing durable).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ackledger import Ledger

from .common import QUICK, Plan, Results, scratch
from .ledger import Request, _timed, open_peer, workload
from .postgres import available as postgres_available
from .postgres import database

PEER = "idem.powertools"
#: (key, label) of each of our runs, in the order they are measured and shown.
OURS = (
    ("idem.sqlite.full", "`@ledger.idempotent`, SQLite synchronous=FULL"),
    ("idem.sqlite.normal", "`@ledger.idempotent`, SQLite synchronous=NORMAL"),
    ("idem.sqlite.using", "`@ledger.idempotent(using_arg=)`, SQLite FULL, the caller's commit"),
    ("idem.postgres", "`@ledger.idempotent`, PostgreSQL"),
    ("idem.postgres.using", "`@ledger.idempotent(using_arg=)`, PostgreSQL, the caller's commit"),
)


def _handler() -> Callable[..., dict[str, int]]:
    counter = itertools.count(1)

    def handle(*args: Any) -> dict[str, int]:
        return {"delivery_no": next(counter)}

    return handle


@contextmanager
def ours(target: str | Path, synchronous: str = "FULL") -> Iterator[Request]:
    """The decorator on its own connection: a claim (durable on PostgreSQL), then a durable
    completion."""
    with Ledger(target, synchronous=synchronous) as ledger:
        handle = _handler()

        def request(case_id: str, work_id: str) -> dict[str, int]:
            return handle(case_id, work_id)

        decorated: Any = ledger.idempotent(key=lambda case_id, work_id: f"{case_id}/{work_id}")
        yield decorated(request)


@contextmanager
def ours_using(target: str | Path) -> Iterator[Request]:
    """The decorator with ``using_arg``: each call in a transaction of the caller's own
    connection, which commits the key and the result with its one commit."""
    with Ledger(target) as ledger:
        if isinstance(target, Path):
            conn: Any = sqlite3.connect(target, timeout=30)
            conn.execute("PRAGMA synchronous = FULL")
        else:
            import psycopg

            conn = psycopg.connect(target)
        try:
            handle = _handler()

            def place(using: object, case_id: str, work_id: str) -> dict[str, int]:
                return handle(case_id, work_id)

            decorated: Any = ledger.idempotent(
                key=lambda using, case_id, work_id: f"{case_id}/{work_id}", using_arg="using"
            )(place)

            def request(case_id: str, work_id: str) -> object:
                answer = decorated(conn, case_id, work_id)
                conn.commit()
                return answer

            yield request
        finally:
            conn.close()


def measure(plan: Plan, results: Results) -> None:
    calls = plan.ledger_requests
    print(f"idempotent: {calls:,} calls a run, every other one a repeat", flush=True)
    keys = workload(calls)
    peer = open_peer(results, "idempotent.peer")
    if peer is not None:
        results.notes.append(f"idempotent: peer {peer.version()}, {calls:,} calls a run")
    why_pg = postgres_available()
    if why_pg is not None:
        results.skip("idempotent.postgres", why_pg)
    labels = dict(OURS)
    with scratch("idempotent") as folder:
        try:
            for rep in range(plan.reps):
                if peer is not None:
                    value = _timed(peer.request, f"idem-{rep}", keys)
                    results.add(PEER, "Powertools `idempotent_function` + Redis", "/s", value)
                for mode in ("FULL", "NORMAL"):
                    key = f"idem.sqlite.{mode.lower()}"
                    with ours(folder / f"{mode}-{rep}.db", mode) as request:
                        results.add(key, labels[key], "/s", _timed(request, "case", keys))
                with ours_using(folder / f"using-{rep}.db") as request:
                    value = _timed(request, "case", keys)
                    results.add("idem.sqlite.using", labels["idem.sqlite.using"], "/s", value)
                if why_pg is None:
                    with database() as url, ours(url) as request:
                        value = _timed(request, "case", keys)
                        results.add("idem.postgres", labels["idem.postgres"], "/s", value)
                    with database() as url, ours_using(url) as request:
                        value = _timed(request, "case", keys)
                        results.add("idem.postgres.using", labels["idem.postgres.using"], "/s",
                                    value)  # fmt: skip
        finally:
            if peer is not None:
                peer.cleanup()
    for label, value in ratios(results):
        print(f"  {label}: {value:.2f} x Powertools+Redis", flush=True)


def ratios(results: Results) -> list[tuple[str, float]]:
    """(label, calls/s of ours / the peer's) for each of our runs measured with the peer."""
    peer = results.get(PEER)
    found: list[tuple[str, float]] = []
    for key, label in OURS:
        value = results.get(key)
        if peer and value is not None:
            found.append((label, value / peer))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idempotent", description=__doc__)
    parser.add_argument("--calls", type=int, default=QUICK.ledger_requests, help="calls a run")
    args = parser.parse_args(argv)
    results = Results()
    measure(dataclasses.replace(QUICK, reps=1, ledger_requests=args.calls), results)
    for key in (PEER, *dict(OURS)):
        value = results.get(key)
        if value is not None:
            print(f"  {results.figures[key].label}: {value:,.0f} calls/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
