"""Liveness (``/healthz``) and readiness (``/readyz``) are different questions: the first never
touches the database, the second is answered by the database."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from ackledger.ledger.app import create_ledger_app
from ackledger.ledger.ledger import Ledger
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import start_service
from ackledger.sink.app import create_sink_app
from ackledger.sink.inbox import Inbox

from . import pg
from .inprocess import InProcess


def test_the_sink_is_ready_while_its_database_answers_and_alive_after(sink_db: Path) -> None:
    inbox = Inbox(sink_db)
    with InProcess(create_sink_app(inbox)) as app:
        status, _, body = app.request("GET", "/readyz")
        assert (status, json.loads(body)) == (200, {"status": "ready"})
        inbox.close()  # the database is gone from under the service
        status, headers, body = app.request("GET", "/readyz")
        problem = json.loads(body)
        assert status == 503 and headers["content-type"] == "application/problem+json"
        assert problem["status"] == 503 and problem["type"].endswith("/not-ready")
        assert "does not answer" in problem["detail"] and headers["retry-after"] == "1"
        # Liveness does not depend on it: restarting the process would not bring it back.
        status, _, body = app.request("GET", "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"


def test_the_ledger_readiness_fails_with_its_database_and_keeps_its_identity(
    ledger_db: Path,
) -> None:
    ledger = Ledger(ledger_db)
    with InProcess(create_ledger_app(ledger)) as app:
        assert app.call("GET", "/readyz")[:1] == (200,)
        ledger.close()
        status, _, problem = app.call("GET", "/readyz")
        assert status == 503 and problem["type"].endswith("/not-ready")
        assert set(problem["ledger"]) == {"pod_uid", "boot_id"}
        status, _, identity = app.call("GET", "/healthz")
        assert status == 200 and identity["boot_id"] == problem["ledger"]["boot_id"]


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - loopback
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.mark.postgres
@pytest.mark.slow
def test_a_real_ledger_on_postgres_is_unready_when_the_connection_is_cut(
    pg_url: str, tmp_path: Path
) -> None:
    """The database reached through a proxy that is then closed (new connections are refused)
    while the server ends the connections the ledger's pool holds."""
    parts = urlsplit(pg_url)
    with FaultProxy(parts.port or 5432) as proxy:
        via_proxy = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
        args = ["serve", "ledger", "--db", via_proxy, "--port", "0"]
        with start_service(args, stderr_path=tmp_path / "ledger.log") as ledger:
            assert _get(ledger.base_url + "/readyz") == (200, {"status": "ready"})
            proxy.close()
            with pg.admin() as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (parts.path.lstrip("/"),),
                )
            status, problem = _get(ledger.base_url + "/readyz")
            assert status == 503 and str(problem["type"]).endswith("/not-ready")
            assert _get(ledger.base_url + "/healthz")[0] == 200
