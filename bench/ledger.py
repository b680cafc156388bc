"""The ledger against a peer, and over HTTP.

In process, on one workload (N requests, every other one a repeat of an earlier key):
ours with synchronous=FULL and NORMAL against Powertools for AWS Lambda's
``idempotent_function`` with its Redis persistence layer on the local Redis (which keeps
nothing on disk). Over HTTP: ``ackledger serve ledger`` under 16 keep-alive clients.

The ledger is built on another branch; until ``ackledger.ledger`` imports, these workloads are
skipped and the report says so.
"""

from __future__ import annotations

import importlib
import itertools
import random
import sqlite3
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackledger.ops.processes import run_cli, start_service

from .common import Plan, Results, rate, scratch
from .load import DELIVERIES, record, run_load

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
HTTP_CLIENTS = 16

Request = Callable[[str, str], object]


def workload(count: int, seed: int = 7) -> list[int]:
    """Key numbers: even positions are new keys, odd ones repeat an earlier key."""
    rng = random.Random(seed)
    keys: list[int] = []
    fresh = 0
    for position in range(count):
        if position % 2 == 0 or fresh == 0:
            keys.append(fresh)
            fresh += 1
        else:
            keys.append(rng.randrange(fresh))
    return keys


def _timed(request: Request, case_id: str, keys: list[int]) -> float:
    """Calls/s of ``request`` over ``keys``; raises when an answer is not the workload's (a
    repeat must answer its key's first delivery, a new key a delivery of its own)."""
    answers = []
    start = time.perf_counter()
    for key in keys:
        answers.append(request(case_id, f"work-{key}"))
    seconds = time.perf_counter() - start
    check_answers(keys, answers)
    return rate(len(keys), seconds)


def check_answers(keys: list[int], answers: list[object]) -> None:
    """Each key's answers name one delivery, and no two keys share one: else the run did the
    work twice (or answered another key's), and its rate counts for nothing."""
    first: dict[int, object] = {}
    for key, answer in zip(keys, answers, strict=True):
        delivery = answer.get("delivery_no") if isinstance(answer, dict) else None
        if delivery is None or first.setdefault(key, delivery) != delivery:
            raise ValueError(f"key {key}: answered {answer!r}, first {first.get(key)!r}")
    if len(set(first.values())) != len(first):
        raise ValueError("two keys were answered with one delivery")


def ledger_class() -> Any | None:
    try:
        module = importlib.import_module("ackledger.ledger.ledger")
    except ImportError:
        return None
    return getattr(module, "Ledger", None)


def ours_rate(folder: Path, synchronous: str, keys: list[int], tag: str) -> float:
    ledger_type = ledger_class()
    assert ledger_type is not None
    ledger = ledger_type(folder / f"ledger-{tag}.db", synchronous=synchronous)
    try:

        def request(case_id: str, work_id: str) -> object:
            return ledger.request(case_id, work_id, "bench-pod", mode="idempotent")

        return _timed(request, f"case-{tag}", keys)
    finally:
        ledger.close()


def raw_rate(folder: Path, synchronous: str, keys: list[int], tag: str) -> float:
    """The same statements as ``Ledger.request`` on SQLite (the claim, then the attempt with
    its number; the counters' trigger fires as in ours) from a bare ``sqlite3`` loop on a
    database ackledger created: no validation, no answer, none of our Python. What this
    schema costs on this machine, so that ours can be read against it and the peer against
    what any Python code on it could do."""
    from ackledger.event import fingerprint
    from ackledger.store.keys import DELIVERIES
    from ackledger.store.sqlite import queries

    ledger_type = ledger_class()
    assert ledger_type is not None
    path = folder / f"raw-{tag}.db"
    ledger_type(path).close()  # schema, migrations and triggers as ours has them
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    run = conn.execute
    claim, applied, seen = DELIVERIES.claim_sql, queries.RECORD_APPLIED, queries.RECORD_SEEN
    fp, pod, case = fingerprint(None), "bench-pod", f"case-{tag}"
    try:
        start = time.perf_counter()
        for key in keys:
            work, now = f"work-{key}", time.time()
            run("BEGIN IMMEDIATE")
            got = run(claim, (case, work, fp, pod, now)).fetchall()
            if got:
                run(applied, (case, work, pod, "idempotent", got[0][0], fp, now, case, work))
            else:
                run(seen, (pod, fp, fp, fp, now, case, work, case, work, case, work)).fetchall()
            run("COMMIT")
        return rate(len(keys), time.perf_counter() - start)
    finally:
        conn.close()


class Powertools:
    """``idempotent_function`` with the Redis persistence layer (ssl=False, loopback)."""

    def __init__(self) -> None:
        # Outside Lambda there is no context to read the remaining time from; Powertools warns
        # once about it and carries on.
        warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
        with warnings.catch_warnings():
            # The Redis layer is deprecated in favour of an alias of itself; same code.
            warnings.simplefilter("ignore")
            import redis
            from aws_lambda_powertools.utilities.idempotency import (
                IdempotencyConfig,
                idempotent_function,
            )
            from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
                RedisCachePersistenceLayer,
            )

            self.client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, ssl=False)
            self.client.ping()
            self.prefix = f"ackledger-bench-{uuid.uuid4().hex}"
            client: Any = self.client  # redis.Redis is the protocol Powertools types loosely
            store = RedisCachePersistenceLayer(client=client)
            config = IdempotencyConfig(expires_after_seconds=900)
            counter = itertools.count(1)

            def handle(req: dict[str, str]) -> dict[str, int]:
                return {"delivery_no": next(counter)}

            decorate: Any = idempotent_function
            self._handle: Callable[..., object] = decorate(
                handle,
                data_keyword_argument="req",
                persistence_store=store,
                config=config,
                key_prefix=self.prefix,
            )

    def request(self, case_id: str, work_id: str) -> object:
        return self._handle(req={"case_id": case_id, "work_id": work_id})

    def version(self) -> str:
        from aws_lambda_powertools.shared.version import VERSION

        info = self.client.info("server")
        return f"aws-lambda-powertools {VERSION}, Redis {info.get('redis_version', '?')}"

    def cleanup(self) -> None:
        for key in self.client.scan_iter(match=f"{self.prefix}*", count=1000):
            self.client.delete(key)
        self.client.close()


def open_peer(results: Results, section: str) -> Powertools | None:
    """Powertools on the local Redis, or None with ``section`` skipped saying why."""
    try:
        return Powertools()
    except Exception as exc:
        results.skip(section, f"Powertools with Redis not available: {exc}")
        return None


def measure_in_process(plan: Plan, results: Results) -> None:
    print("ledger in process vs Powertools", flush=True)
    keys = workload(plan.ledger_requests)
    peer = open_peer(results, "ledger.peer")
    if peer is not None:
        results.notes.append(f"peer: {peer.version()}")
    have_ledger = ledger_class() is not None
    if not have_ledger:
        results.skip(
            "ledger", "ledger not available (ackledger.ledger does not import on this branch)"
        )
    with scratch("ledger") as folder:
        try:
            for rep in range(plan.reps):
                if peer is not None:
                    results.add(
                        "ledger.powertools",
                        "Powertools idempotent_function + Redis",
                        "/s",
                        _timed(peer.request, f"case-{rep}", keys),
                    )
                if have_ledger:
                    for mode in ("FULL", "NORMAL"):
                        results.add(
                            f"ledger.{mode.lower()}",
                            f"Ledger.request, synchronous={mode}",
                            "/s",
                            ours_rate(folder, mode, keys, f"{mode}{rep}"),
                        )
                        results.add(
                            f"ledger.raw_{mode.lower()}",
                            f"bare sqlite3 loop, same statements and schema, synchronous={mode}",
                            "/s",
                            raw_rate(folder, mode, keys, f"raw{mode}{rep}"),
                        )
        finally:
            if peer is not None:
                peer.cleanup()
    for key in (
        "ledger.powertools",
        "ledger.full",
        "ledger.raw_full",
        "ledger.normal",
        "ledger.raw_normal",
    ):
        value = results.get(key)
        if value is not None:
            print(f"  {results.figures[key].label}: {value:,.0f}/s", flush=True)
    peer_rate = results.get("ledger.powertools")
    for mode in ("full", "normal"):
        ours, bare = results.get(f"ledger.{mode}"), results.get(f"ledger.raw_{mode}")
        if peer_rate and ours and bare:
            results.notes.append(
                f"ledger {mode.upper()}: the bare sqlite3 loop makes {bare / peer_rate:.2f} x "
                f"Powertools+Redis (the ceiling of this schema here); ours is "
                f"{ours / bare:.2f} of the bare loop"
            )


def delivery_requests(tag: str) -> Callable[[int, int], dict[str, Any]]:
    """Request bodies for the load client: every other request repeats the one before it (a
    retried job), each client works in its own case."""

    def make(client: int, number: int) -> dict[str, Any]:
        return {
            "case_id": f"case-{tag}-{client}",
            "work_id": f"work-{number // 2}",
            "pod_uid": f"pod-{number}",
            "mode": "idempotent",
        }

    return make


def ledger_service_available() -> bool:
    return run_cli("serve", "ledger", "--help", timeout=30).returncode == 0


def measure_http(plan: Plan, results: Results) -> None:
    print(f"ledger over HTTP, {HTTP_CLIENTS} clients", flush=True)
    if not ledger_service_available():
        results.skip(
            "ledger.http", "ledger not available (no `ackledger serve ledger` on this branch)"
        )
        return
    with scratch("ledger-http") as folder:
        service = start_service(
            ["serve", "ledger", "--db", str(folder / "ledger.db"), "--port", "0"],
            stderr_path=folder / "ledger.log",
        )
        try:
            for rep in range(plan.reps):
                load = run_load(
                    service.base_url,
                    DELIVERIES,
                    HTTP_CLIENTS,
                    plan.ledger_http_seconds,
                    delivery_requests(f"r{rep}"),
                )
                record(
                    results, "ledger.http", f"ledger POST /deliveries, {HTTP_CLIENTS} clients", load
                )
        finally:
            service.stop()
