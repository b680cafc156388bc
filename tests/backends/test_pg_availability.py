"""The ledger's key locks on PostgreSQL: a request never waits without end for a key whose
holder is frozen, and several requests in one call cannot deadlock with another call
(both found by review)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest

from ackledger.ledger.ledger import Ledger, check_request
from ackledger.ops.processes import start_service
from ackledger.store.postgres.queries import KEY_LOCK_CLASS
from tests.events import lab
from tests.loopback import request

pytestmark = pytest.mark.slow


def _hold_key(url: str, case_id: str, work_id: str) -> psycopg.Connection[Any]:
    """A transaction that holds the key's lock, as a frozen replica would."""
    conn = psycopg.connect(url)
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
        (KEY_LOCK_CLASS, f"{case_id}/{work_id}"),
    )
    return conn


def test_a_request_gives_up_on_a_frozen_holder_and_the_service_answers_503(
    pg_url: str, tmp_path: Any
) -> None:
    holder = _hold_key(pg_url, "c", "frozen")
    args = ["serve", "ledger", "--db", pg_url, "--port", "0"]
    with start_service(args, stderr_path=tmp_path / "ledger.log") as service:
        try:
            ask = {"case_id": "c", "work_id": "frozen", "pod_uid": "p", "mode": "idempotent"}
            started = time.monotonic()
            status, headers, body = request(
                service, "POST", "/deliveries", json.dumps(ask).encode()
            )
            waited = time.monotonic() - started
            assert status == 503, body
            problem = json.loads(body)
            assert problem["ledger"]["pod_uid"] and headers["retry-after"] == "1"
            assert waited < 30  # KEY_LOCK_TIMEOUT, not forever
            other = {**ask, "work_id": "free"}
            assert request(service, "POST", "/deliveries", json.dumps(other).encode())[0] == 201
        finally:
            holder.close()  # the frozen replica's transaction ends
        assert request(service, "POST", "/deliveries", json.dumps(ask).encode())[0] == 201


def test_submit_many_in_opposite_orders_does_not_deadlock(pg_url: str) -> None:
    keys = [("c", f"w-{n}") for n in range(12)]
    errors: list[BaseException] = []

    def run(order: list[tuple[str, str]]) -> None:
        try:
            with Ledger(pg_url) as ledger:
                for _ in range(15):
                    reqs = [check_request(c, w, "pod", "idempotent", None) for c, w in order]
                    ledger.submit_many(reqs)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(keys,)),
        threading.Thread(target=run, args=(list(reversed(keys)),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    with Ledger(pg_url) as ledger:
        assert len(ledger.deliveries("c")) == 12  # one per key, however often asked
        assert ledger.counters()["attempts"] == 2 * 15 * 12


def _terminate_connections(url: str) -> int:
    """What a PostgreSQL restart or fail-over does to a service's pooled connections."""
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        ).fetchall()
    return len(rows)


#: What each route takes (the sink: CloudEvents structured mode).
CONTENT_TYPES = {
    "/events": "application/cloudevents+json",
    "/events/batch": "application/cloudevents-batch+json",
    "/deliveries": "application/json",
}


@pytest.mark.parametrize(
    ("service", "path", "body"),
    [
        ("sink", "/events", lab("e-1", "pen", 1)),
        ("sink", "/events/batch", [lab("e-1", "pen", 1)]),
        (
            "ledger",
            "/deliveries",
            {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent"},
        ),
    ],
)
def test_a_lost_database_connection_is_a_503_problem_then_a_retry_works(
    pg_url: str, tmp_path: Any, service: str, path: str, body: object
) -> None:
    args = ["serve", service, "--db", pg_url, "--port", "0"]
    raw = json.dumps(body).encode()
    kind = {"Content-Type": CONTENT_TYPES[path]}
    with start_service(args, stderr_path=tmp_path / f"{service}.log") as running:
        assert _terminate_connections(pg_url) >= 1
        status, headers, answer = request(running, "POST", path, raw, kind)
        assert status == 503, answer
        problem = json.loads(answer)
        assert problem["status"] == 503 and "again is safe" in problem["detail"]
        assert ("ledger" in problem) == (service == "ledger")
        assert headers["content-type"] == "application/problem+json"
        retried = request(running, "POST", path, raw, kind)
        assert retried[0] in (200, 201), retried
