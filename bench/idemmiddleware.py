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
measured in the same run. Its durable commits are counted too: in the first repetition strace
is attached to each server for a short load of new keys, and its durable commits are divided by
the requests it answered. Every file is WAL with synchronous=FULL, so each commit syncs the WAL
once, and each checkpoint syncs the WAL twice (before it, and the restarted log's header after)
and the database file once: the commits are the WAL syncs less two for each sync of a database
file.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import Plan, Results, scratch, timed_loop
from .load import LoadResult, Route, _json_object, record, run_load
from .rawserver import one_row_committer
from .userapps import runs, served, server_pid

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
#: How long strace watches each server serve new keys (every syscall of the traced process
#: stops for it, so the rate is not measured there).
COUNT_SECONDS = 0.5
#: The file a sync names in ``strace -y`` output.
SYNCED_FILE = re.compile(r"\b(?:fsync|fdatasync)\(\d+<([^>]+)>")


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


def durable_commits(base: str, kind: str, tag: str, folder: Path) -> float | str:
    """The durable commits per request of a short ``kind`` load, counted by strace attached to
    the server that answers ``base`` (see the module's docstring); or why they could not be."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed"
    trace = folder / f"{tag}.strace"
    command = [strace, "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", str(trace),
               "-p", str(server_pid(base))]  # fmt: skip
    tracer = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert tracer.stderr is not None
    try:
        said = tracer.stderr.readline()  # "strace: Process N attached ..." once it holds it
        if "attached" not in said:
            return f"strace could not attach: {said.strip() or 'no answer'}"
        time.sleep(0.2)  # its other threads too
        load = _load(base, kind, tag, COUNT_SECONDS)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
    if not load.all_expected or not load.requests:
        return "its requests were not all answered as the workload expects"
    return commits_in(trace.read_text()) / load.requests


def commits_in(trace: str) -> int:
    """The durable commits an ``strace -y -e trace=fsync,fdatasync`` output shows: the WAL
    syncs less two for each sync of a database file (a checkpoint's)."""
    synced = [found.group(1) for line in trace.splitlines()
              if (found := SYNCED_FILE.search(line))]  # fmt: skip
    checkpoints = sum(1 for name in synced if name.endswith(".db"))
    return sum(1 for name in synced if name.endswith("-wal")) - 2 * checkpoints


def measure(plan: Plan, results: Results) -> None:
    print("IdempotencyMiddleware against the bare endpoint", flush=True)
    with scratch("idem-mw") as folder:
        for rep in range(plan.reps):
            rates: dict[str, float] = {}
            syncs: dict[str, float | str] = {}
            # Each app in turn goes first: the shared disk's fsync time drifts within a run.
            for app, kinds, ledger in APPS[rep % 3 :] + APPS[: rep % 3]:
                env = {"BENCH_ORDERS_DB": str(folder / f"orders-{rep}.db"),
                       "BENCH_LEDGER_DB": str(folder / f"{ledger}-{rep}.db")}  # fmt: skip
                with served(app, folder, **env) as base:
                    for kind in kinds:
                        load = _load(base, kind, f"{kind}{rep}", plan.load_seconds)
                        rates[kind] = _record(results, kind, load)
                        if rep == 0 and kind != "replay":
                            syncs[kind] = durable_commits(base, kind, f"count-{kind}", folder)
            if syncs:
                _record_syncs(results, syncs)
            commit = 1e6 / timed_loop(one_row_committer(str(folder / f"floor-{rep}.db")),
                                      plan.floor_seconds)  # fmt: skip
            results.add("idem_mw.commit", "one-row commit, SQLite FULL, same folder", "µs", commit)
            for key, kind, words in EXTRAS:
                if rates[kind] and rates["bare"]:
                    extra = 1e6 * (1 / rates[kind] - 1 / rates["bare"])
                    results.add(key, f"a first request's time over the bare endpoint's, {words}, "
                                "in FULL commits", "commits", extra / commit)  # fmt: skip


#: The durable commits each mode's first request adds to the bare endpoint's, counted:
#: (figure, workload, words).
SYNC_EXTRAS = (
    ("idem_mw.extra_syncs", "first", "the key completed by the middleware"),
    ("idem_mw.extra_syncs_in_tx", "in_tx", "the key completed in the endpoint's transaction"),
)


def _record_syncs(results: Results, syncs: dict[str, float | str]) -> None:
    for kind, found in syncs.items():
        label = f"{WORDS[kind]}, durable commits a request (strace)"
        if isinstance(found, str):
            results.refuse(f"idem_mw.syncs.{kind}", label, "commits", found)
        else:
            results.add(f"idem_mw.syncs.{kind}", label, "commits", found)
            print(f"  {label}: {found:.2f}", flush=True)
    bare = syncs.get("bare")
    for key, kind, words in SYNC_EXTRAS:
        label = f"a first request's durable commits over the bare endpoint's, {words}"
        mode = syncs.get(kind)
        if isinstance(mode, float) and isinstance(bare, float):
            results.add(key, label, "commits", mode - bare)
        else:
            results.refuse(key, label, "commits", "the syncs were not counted")


def _record(results: Results, kind: str, load: LoadResult) -> float:
    record(results, f"idem_mw.{kind}", WORDS[kind], load)
    return load.throughput if load.all_expected else 0.0
