"""The user's own ASGI apps the user's-code sections serve under uvicorn, each made by a
factory reading its database from the environment:

- ``inbox_app``: ``Inbox.asgi()`` mounted in a Starlette app (``BENCH_INBOX_DB``);
- ``bare_app`` and ``idempotent_app``: a ``POST /orders`` endpoint, on its own and behind
  ``IdempotencyMiddleware`` (``BENCH_LEDGER_DB``). Its effect is one durable commit (a row in
  the SQLite file ``BENCH_ORDERS_DB``, synchronous=FULL), what a real endpoint would at least
  do; it answers the order it was sent and how many times it has run, and ``GET /runs`` tells
  that count (and the serving process), so a replay that ran it shows;
- ``in_transaction_app``: the same endpoint behind the middleware, writing its row and the
  key's completion (``request.state.idempotency.complete``) in one transaction on the
  ledger's own SQLite file (synchronous=FULL): one durable commit for the effect and the key.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from .rawserver import ONE_ROW, ROW, one_row_committer, one_row_connection

ROOT = Path(__file__).resolve().parent.parent


def inbox_app() -> Starlette:
    from ackledger import Inbox

    return Starlette(routes=[Mount("/", app=Inbox(os.environ["BENCH_INBOX_DB"]).asgi())])


def _shop(effect: Callable[[Request, bytes], None]) -> Starlette:
    """``POST /orders`` answering ``body`` once ``effect(request, body)`` committed it, and
    ``GET /runs``."""
    runs = itertools.count(1)
    ran = [0]

    async def orders(request: Request) -> Response:
        sent = json.loads(await request.body())
        run = next(runs)
        body = json.dumps({"order": sent["key"], "run": run}).encode()
        effect(request, body)  # on the loop: the workloads have one client, so nothing waits
        ran[0] = run
        return Response(body, 201, media_type="application/json")

    async def count(request: Request) -> Response:
        return JSONResponse({"runs": ran[0], "pid": os.getpid()})

    return Starlette(routes=[Route("/orders", orders, methods=["POST"]),
                             Route("/runs", count, methods=["GET"])])  # fmt: skip


def bare_app() -> Starlette:
    commit = one_row_committer(os.environ["BENCH_ORDERS_DB"])
    return _shop(lambda request, body: commit())


def idempotent_app() -> Any:
    from ackledger import IdempotencyMiddleware, Ledger

    return IdempotencyMiddleware(bare_app(), Ledger(os.environ["BENCH_LEDGER_DB"]))


def in_transaction_app() -> Any:
    from ackledger import IdempotencyMiddleware, Ledger

    ledger = Ledger(os.environ["BENCH_LEDGER_DB"])  # its schema first, then the order table
    db = one_row_connection(os.environ["BENCH_LEDGER_DB"])

    def effect(request: Request, body: bytes) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(ONE_ROW, ROW)
            request.state.idempotency.complete(
                db, status=201, body=body, headers={"Content-Type": "application/json"}
            )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    return IdempotencyMiddleware(_shop(effect), ledger)


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def runs(base_url: str) -> int:
    """How many times the served ``/orders`` endpoint has run."""
    return int(json.loads(_get(int(base_url.rsplit(":", 1)[1]), "/runs"))["runs"])


def server_pid(base_url: str) -> int:
    """The process that serves ``/orders``."""
    return int(json.loads(_get(int(base_url.rsplit(":", 1)[1]), "/runs"))["pid"])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(factory: str, folder: Path, **env: str) -> Iterator[str]:
    """``uvicorn --factory bench.userapps:FACTORY`` in a process of its own; its base URL."""
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", f"bench.userapps:{factory}",
               "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]  # fmt: skip
    with (folder / f"{factory}.log").open("ab") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env})  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{factory} did not start: see {folder / factory}.log")
            try:
                _get(port, "/")  # any answer: it serves
                break
            except OSError:
                time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        process.wait(30)
