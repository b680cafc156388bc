"""What ``@ledger.idempotent`` and ``IdempotencyMiddleware`` wait for the disk for on a SQLite
synchronous=FULL database, seen in the system calls of a real process (strace): the completion
of a new key is synced, its claim, its lease renewals and its release are committed without a
sync of their own, and a key completed in the endpoint's own transaction adds no sync."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

#: Between two syncs of ``<db>.marks``: ``NEW`` new keys completed (each called twice), ``FAILED``
#: calls that raise (their keys released), and one call that outlives its lease several times
#: and prints the lease it still holds.
NEW, FAILED = 6, 3
CHILD = (
    textwrap.dedent(
        """
    import os, sqlite3, sys, time
    from ackledger import Ledger

    path = sys.argv[1]
    with Ledger(path, synchronous="FULL") as ledger:
        work = ledger.idempotent(key=lambda n: f"k{n}")(lambda n: {"n": n})

        @ledger.idempotent(key=lambda n: f"f{n}")
        def fail(n):
            raise RuntimeError(n)

        @ledger.idempotent(key=lambda: "long", lease=1)
        def long():
            started = time.time()
            time.sleep(1.5)
            with sqlite3.connect(path) as conn:
                (until,) = conn.execute(
                    "SELECT lease_expires_at FROM ackledger_idempotency_keys WHERE key = 'long'"
                ).fetchone()
            return until - started

        marks = os.open(path + ".marks", os.O_WRONLY | os.O_CREAT)
        os.fsync(marks)
        for n in range(NEW):
            assert work(n) == work(n) == {"n": n}
        for n in range(FAILED):
            try:
                fail(n)
            except RuntimeError:
                pass
        print(long())
        os.fsync(marks)
    """
    )
    .replace("NEW", str(NEW))
    .replace("FAILED", str(FAILED))
)


def _traced(tmp_path: Path, child: str, argument: Path) -> tuple[str, list[str]]:
    """Run ``python -c child argument`` under strace: its output and its syncs, one a line."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace.txt"
    done = subprocess.run(
        [strace, "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", str(trace),
         sys.executable, "-c", child, str(argument)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0 and "ptrace" in done.stderr.lower():
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout, trace.read_text().splitlines()


def test_only_the_completion_of_a_new_key_is_synced(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    printed, lines = _traced(tmp_path, CHILD, db)
    # The long call's lease was renewed past its first second while it ran.
    assert float(printed) > 1.2, printed
    marks = [i for i, line in enumerate(lines) if ".marks>" in line]
    assert len(marks) == 2, lines
    synced = [line for line in lines[marks[0] : marks[1]] if f"{db.name}-wal>" in line]
    # One sync per completed key (the long call's too): none for a claim, a repeat's look, a
    # renewal or a release. Durable claims would add NEW + FAILED + 1 syncs and durable
    # renewals and releases more; a completion that skipped its sync would leave fewer.
    assert len(synced) == NEW + 1, synced


#: The file a sync names in strace -y output.
SYNCED_FILE = re.compile(r"\b(?:fsync|fdatasync)\(\d+<([^>]+)>")
#: New keys each app below serves between two syncs of ``<folder>/marks``.
REQUESTS = 6
#: Three Starlette apps served by uvicorn in the traced process and asked over loopback by
#: ``http.client``: ``bare``, an endpoint whose effect is one row committed in
#: ``bare.db``; ``default``, the same endpoint (its row in ``default-orders.db``) behind
#: ``IdempotencyMiddleware`` with its ledger in ``default.db``; ``own``, the endpoint behind
#: the middleware writing its row and the key's completion in one transaction in the ledger's
#: ``own.db``. Every file is WAL with synchronous=FULL. Prints the apps' names in order.
SERVED = textwrap.dedent(
    """
    import http.client, os, socket, sqlite3, sys, threading, time
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from ackledger import IdempotencyMiddleware, Ledger

    folder = sys.argv[1]

    def connect(name):
        # Each app's server runs its own thread.
        db = sqlite3.connect(os.path.join(folder, name), isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE IF NOT EXISTS orders (body BLOB NOT NULL)")
        return db

    def shop(effect):
        async def orders(request):
            body = await request.body()
            effect(request, body)
            return Response(body, 201, media_type="application/json")

        return Starlette(routes=[Route("/orders", orders, methods=["POST"])])

    def row_in(db, *, completes=False):
        def effect(request, body):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO orders VALUES (?)", (body,))
            if completes:
                request.state.idempotency.complete(
                    db, status=201, body=body, headers={"Content-Type": "application/json"}
                )
            db.execute("COMMIT")
        return effect

    def ledger(name):
        return Ledger(os.path.join(folder, name), synchronous="FULL")

    own_ledger = ledger("own.db")  # its schema, then the endpoint's table
    apps = {
        "bare": shop(row_in(connect("bare.db"))),
        "default": IdempotencyMiddleware(
            shop(row_in(connect("default-orders.db"))), ledger("default.db")
        ),
        "own": IdempotencyMiddleware(shop(row_in(connect("own.db"), completes=True)), own_ledger),
    }
    ports = {}
    for name, app in apps.items():
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        ports[name] = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
        while not server.started:
            time.sleep(0.01)

    def post(conn, key):
        body = ('{"key": "%s"}' % key).encode()
        conn.request("POST", "/orders", body, {"Idempotency-Key": key,
                                                "Content-Type": "application/json"})
        answer = conn.getresponse()
        got = (answer.status, answer.read(), answer.getheader("idempotent-replayed"))
        assert got == (201, body, None), got

    clients = {name: http.client.HTTPConnection("127.0.0.1", port) for name, port in ports.items()}
    for name, conn in clients.items():
        post(conn, "warm")  # a first request of each app before the count
    marks = os.open(os.path.join(folder, "marks"), os.O_WRONLY | os.O_CREAT)
    os.fsync(marks)
    for name, conn in clients.items():
        for n in range(REQUESTS):
            post(conn, f"{name}-{n}")
        os.fsync(marks)
    print(" ".join(clients))
    """
).replace("REQUESTS", str(REQUESTS))


def test_a_first_request_syncs_once_more_than_the_bare_endpoint_and_not_with_its_key_in_its_tx(
    tmp_path: Path,
) -> None:
    """A new key costs the middleware one more WAL sync than the bare endpoint: its completion
    (the claim skips its own); completed in the endpoint's transaction, none more at all."""
    printed, lines = _traced(tmp_path, SERVED, tmp_path)
    names = printed.split()
    marks = [i for i, line in enumerate(lines) if "/marks>" in line]
    assert len(marks) == len(names) + 1, lines
    # Each app's syncs between its two marks, counted by file (a call that strace shows cut in
    # two, "unfinished" then "resumed", names its file once).
    synced = {
        name: Counter(Path(found.group(1)).name for line in lines[start + 1 : end]
                      if (found := SYNCED_FILE.search(line)))
        for name, start, end in zip(names, marks[:-1], marks[1:], strict=True)
    }  # fmt: skip
    # A durable claim would add REQUESTS syncs to both middleware apps; a completion that did
    # not ride on the endpoint's commit would add REQUESTS to "own".
    assert synced == {
        "bare": {"bare.db-wal": REQUESTS},
        "default": {"default-orders.db-wal": REQUESTS, "default.db-wal": REQUESTS},
        "own": {"own.db-wal": REQUESTS},
    }, lines
