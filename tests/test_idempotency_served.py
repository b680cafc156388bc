"""``IdempotencyMiddleware`` in real uvicorn processes (tests/idempotency_app.py), talked to
over loopback: 50 concurrent requests with one key against two processes on one PostgreSQL
database run the endpoint once; a server killed with SIGKILL while it holds a key leaves it to
the next request after the lease, which runs once more and completes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests import pg
from tests.idempotency_app import EFFECTS
from tests.opshelp import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 50
#: A served app's port and process.
Served = tuple[int, "subprocess.Popen[bytes]"]


def _ask(
    port: int, method: str, path: str, key: str | None, body: bytes = b"{}"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        conn.request(method, path, body, headers)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def _answers(port: int) -> bool:
    try:
        return _ask(port, "GET", "/read", None)[0] == 200
    except OSError:
        return False


@contextmanager
def serving(
    folder: Path, name: str, db: str, **env: str
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", "tests.idempotency_app:from_env"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "IDEM_DB": db, **env},
        )
    try:
        wait_until(lambda: process.poll() is not None or _answers(port), f"{name} to serve")
        assert process.poll() is None, log_path.read_text()
        yield port, process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)


def _effects(db: str) -> int:
    return int(pg.rows(db, "SELECT COUNT(*) FROM idem_effects")[0][0])


def test_fifty_requests_with_one_key_on_two_processes_run_once(tmp_path: Path, pg_url: str) -> None:
    pg.rows(pg_url, EFFECTS)
    with (
        serving(tmp_path, "a", pg_url, IDEM_SLEEP="0.5") as (port_a, _),
        serving(tmp_path, "b", pg_url, IDEM_SLEEP="0.5") as (port_b, _),
    ):
        barrier = threading.Barrier(REQUESTS)

        def one(i: int) -> tuple[int, dict[str, str], bytes]:
            barrier.wait()
            return _ask(port_a if i % 2 else port_b, "POST", "/orders", '"race-1"', b'{"n":1}')

        with ThreadPoolExecutor(REQUESTS) as pool:
            answers = list(pool.map(one, range(REQUESTS)))
        # Once both are done, a late repeat on either replays.
        late = [_ask(port, "POST", "/orders", "race-1", b'{"n":1}') for port in (port_a, port_b)]
    assert _effects(pg_url) == 1
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {201, 409}, statuses
    ran = [a for a in answers if a[0] == 201 and "idempotent-replayed" not in a[1]]
    assert len(ran) == 1
    for status, headers, body in answers:
        if status == 409:
            assert headers["content-type"] == "application/problem+json"
            assert int(headers["retry-after"]) >= 1
            assert json.loads(body)["status"] == 409
        else:
            assert body == ran[0][2]
    for status, headers, body in late:
        assert (status, headers["idempotent-replayed"], body) == (201, "true", ran[0][2])


def test_a_killed_holder_is_taken_over_after_the_lease(tmp_path: Path, pg_url: str) -> None:
    pg.rows(pg_url, EFFECTS)
    doomed = serving(tmp_path, "doomed", pg_url, IDEM_LEASE="2s", IDEM_SLEEP="3600")
    with doomed as (port, proc), ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_ask, port, "POST", "/orders", "crash-1", b'{"n":2}')
        wait_until(lambda: _effects(pg_url) == 1, "the first request to run")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        try:
            pending.result(30)
            raise AssertionError("the killed server answered")
        except (OSError, http.client.HTTPException):
            pass
    rows = pg.rows(pg_url, "SELECT key, state FROM ackledger_idempotency_keys")
    assert rows == [("crash-1", "in_progress")]
    with serving(tmp_path, "next", pg_url, IDEM_LEASE="2s") as (port, _):
        status, headers, _ = _ask(port, "POST", "/orders", "crash-1", b'{"n":2}')
        if status == 409:  # the dead holder's lease has not run out yet
            assert int(headers["retry-after"]) <= 2
            wait_until(
                lambda: _ask(port, "POST", "/orders", "crash-1", b'{"n":2}')[0] != 409,
                "the lease to run out",
            )
        else:  # pragma: no cover - only on a very slow machine
            assert status == 201
        again = _ask(port, "POST", "/orders", "crash-1", b'{"n":2}')
        assert (again[0], again[1]["idempotent-replayed"]) == (201, "true")
    assert _effects(pg_url) == 2
    rows = pg.rows(pg_url, "SELECT key, state FROM ackledger_idempotency_keys")
    assert rows == [("crash-1", "completed")]


def test_bad_input_is_a_problem_and_stores_nothing(tmp_path: Path, pg_url: str) -> None:
    pg.rows(pg_url, EFFECTS)
    with serving(tmp_path, "strict", pg_url) as (port, _):
        answers = [
            _ask(port, "POST", "/orders", ""),
            _ask(port, "POST", "/orders", "k" * 256),
            _ask(port, "POST", "/orders", '"no end'),
            _ask(port, "POST", "/orders", "a b"),
            _ask(port, "POST", "/orders", "k", b"x" * (1024 * 1024 + 1)),
            _ask(port, "PUT", "/orders", "k"),
            _ask(port, "GET", "/read", "k"),
        ]
    assert [status for status, _, _ in answers] == [400, 400, 400, 400, 413, 400, 400]
    for _, headers, body in answers:
        assert headers["content-type"] == "application/problem+json"
        assert "Idempotency-Key" in json.loads(body)["detail"]
    assert _effects(pg_url) == 0
    assert pg.rows(pg_url, "SELECT COUNT(*) FROM ackledger_idempotency_keys") == [(0,)]
