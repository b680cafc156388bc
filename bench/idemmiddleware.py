"""``IdempotencyMiddleware`` (ledger on a SQLite file, synchronous=FULL) in front of a user's
Starlette endpoint under uvicorn, against the bare endpoint, one keep-alive client
(``bench/load.py``):

- a replay: every request repeats its client's key, answered from the ledger without running
  the endpoint (checked afterwards: the endpoint ran once per client);
- a first request: every request a new key, so the middleware claims and completes each;
- a first request whose endpoint completes the key itself, in the transaction of its row on
  the ledger's file (``HeldKey.complete``): the middleware only claims.

The endpoint's effect is one one-row FULL commit (``bench/userapps.py``). Each first request's
extra time over the bare endpoint is also shown in one-row FULL commits of the same folder,
measured in the same run.
"""

from __future__ import annotations

from typing import Any

from .common import Plan, Results, scratch, timed_loop
from .load import LoadResult, Route, _json_object, record, run_load
from .rawserver import one_row_committer
from .userapps import runs, served

CLIENTS = 1


def order_made(sent: dict[str, Any], status: int, content_type: str, body: bytes) -> str | None:
    """``POST /orders``: 201 with the order of this very key."""
    if status != 201:
        return f"status {status}"
    answer = _json_object(content_type, body)
    if isinstance(answer, str):
        return answer
    return None if answer.get("order") == sent["key"] else "the answer of another key"


ORDERS = Route("/orders", "application/json", order_made,
               headers=lambda sent: f'Idempotency-Key: "{sent["key"]}"\r\n')  # fmt: skip
WORDS = {
    "bare": "the bare endpoint",
    "first": "`IdempotencyMiddleware`, a new key each request",
    "replay": "`IdempotencyMiddleware`, a replay each request",
    "in_tx": "`IdempotencyMiddleware`, a new key each request, completed in the endpoint's "
    "transaction",
}
#: Each served app, its workloads, and its ledger's file.
APPS = (
    ("bare_app", ("bare",), "ledger"),
    ("idempotent_app", ("first", "replay"), "ledger"),
    ("in_transaction_app", ("in_tx",), "ledger-tx"),
)
#: The extra time of each mode's first request: (figure, workload, words).
EXTRAS = (
    ("idem_mw.extra", "first", "the key completed by the middleware"),
    ("idem_mw.extra_in_tx", "in_tx", "the key completed in the endpoint's transaction"),
)


def _load(base: str, kind: str, tag: str, seconds: float) -> LoadResult:
    def make(client: int, number: int) -> dict[str, Any]:
        key = f"{tag}-{client}" if kind == "replay" else f"{tag}-{client}-{number}"
        return {"key": key, "items": [1, 2, 3]}

    before = runs(base)
    load = run_load(base, ORDERS, CLIENTS, seconds, make)
    ran = runs(base) - before
    expected = CLIENTS if kind == "replay" else load.requests
    if ran != expected:
        load.wrong[f"the endpoint ran {ran} times for {expected} keys"] += 1
    return load


def measure(plan: Plan, results: Results) -> None:
    print("IdempotencyMiddleware against the bare endpoint", flush=True)
    with scratch("idem-mw") as folder:
        for rep in range(plan.reps):
            rates: dict[str, float] = {}
            # Each app in turn goes first: the shared disk's fsync time drifts within a run.
            for app, kinds, ledger in APPS[rep % 3 :] + APPS[: rep % 3]:
                env = {"BENCH_ORDERS_DB": str(folder / f"orders-{rep}.db"),
                       "BENCH_LEDGER_DB": str(folder / f"{ledger}-{rep}.db")}  # fmt: skip
                with served(app, folder, **env) as base:
                    for kind in kinds:
                        load = _load(base, kind, f"{kind}{rep}", plan.load_seconds)
                        rates[kind] = _record(results, kind, load)
            commit = 1e6 / timed_loop(one_row_committer(str(folder / f"floor-{rep}.db")),
                                      plan.floor_seconds)  # fmt: skip
            results.add("idem_mw.commit", "one-row commit, SQLite FULL, same folder", "µs", commit)
            for key, kind, words in EXTRAS:
                if rates[kind] and rates["bare"]:
                    extra = 1e6 * (1 / rates[kind] - 1 / rates["bare"])
                    results.add(key, f"a first request's time over the bare endpoint's, {words}, "
                                "in FULL commits", "commits", extra / commit)  # fmt: skip


def _record(results: Results, kind: str, load: LoadResult) -> float:
    record(results, f"idem_mw.{kind}", WORDS[kind], load)
    return load.throughput if load.all_expected else 0.0
