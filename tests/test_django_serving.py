"""``manage.py ackledger serve sink`` and ``manage.py ackledger consume`` run the inbox on
Django's connection inside ``transaction.atomic()`` by themselves: the shop's handler saves a
``Shipment`` model in the receipt's transaction, a re-send is a duplicate, a raising handler
leaves neither the model nor the receipt; SIGTERM ends both with "stopped" and exit 0. Real
processes, the database read from the test's own connections."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import NotAcknowledged, new_event, send_http
from ackledger.django.commands import with_django
from ackledger.ops.processes import cli_command

from .djangohelp import KINDS, PROJECT, Project, project_on
from .opshelp import wait_until
from .rabbit import publish, rabbit_queue

pytestmark = pytest.mark.slow

TYPE = "com.example.order.placed"


@pytest.fixture(params=KINDS)
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Project]:
    for found in project_on(request.param, tmp_path):
        found.manage("migrate")
        yield found


def placed(number: str, sku: str = "tea") -> dict[str, Any]:
    return new_event(TYPE, {"order": number, "sku": sku, "qty": 1}, source="/shop", id=number)


def shipments(project: Project) -> list[tuple[Any, ...]]:
    return project.rows("SELECT order_number, sku FROM shop_shipment ORDER BY order_number")


def receipts(project: Project, number: str) -> list[tuple[Any, ...]]:
    sql = "SELECT receipts FROM ackledger_inbox WHERE source = '/shop' AND id = ?"
    return project.rows(sql, (number,))


def stopped(process: subprocess.Popen[str]) -> str:
    """SIGTERM, then the process's whole output once it has exited 0."""
    process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out
    assert "stopped" in out, out
    return out


def test_manage_py_serve_sink_saves_the_model_with_the_receipt(project: Project) -> None:
    server = project.start("ackledger", "serve", "sink", "--port", "0")
    assert server.stdout is not None
    line = server.stdout.readline()
    assert "listening on http://127.0.0.1:" in line, line
    url = line.split("listening on ", 1)[1].strip() + "/events"
    try:
        assert send_http(placed("1"), url) is True
        assert send_http(placed("1"), url) is True
        with pytest.raises(NotAcknowledged) as refused:
            send_http(placed("2", "out-of-stock"), url)
        assert refused.value.status == 503
    finally:
        out = stopped(server)
    assert "Traceback" not in out, out
    assert shipments(project) == [("1", "tea")]
    assert receipts(project, "1") == [(2,)]
    assert receipts(project, "2") == []


def test_manage_py_consume_saves_the_model_and_stops_on_sigterm(project: Project) -> None:
    with rabbit_queue("test-django") as (url, channel):
        for event in (placed("7"), placed("7")):
            publish(channel, url, event)
        consumer = project.start("ackledger", "consume", "--from", url)
        try:
            wait_until(lambda: receipts(project, "7") == [(2,)], "the send and the re-send")
        finally:
            stopped(consumer)
    assert shipments(project) == [("7", "tea")]


def test_django_on_another_database_than_db_is_refused(project: Project, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    done = subprocess.run(
        cli_command("serve", "sink", "--db", str(other), "--port", "0",
                    "--django", "site_config.settings"),
        env=project.env, cwd=PROJECT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "reaches another database than --db" in done.stderr, done.stderr
    assert not other.exists()


def test_serve_sink_and_consume_get_django_unless_a_session_is_named() -> None:
    module = "site_config.settings"
    assert with_django(["serve", "sink", "--db", "x"], module) == [
        "serve", "sink", "--db", "x", "--django", module
    ]  # fmt: skip
    assert with_django(["consume", "--from", "u"], module)[-2:] == ["--django", module]
    for given in (["--session", "m:S"], ["--session=m:S"], ["--django", "other"]):
        assert with_django(["consume", *given], module) == ["consume", *given]
    assert with_django(["relay", "--to", "u"], module) == ["relay", "--to", "u"]
    assert with_django(["serve", "ledger"], module) == ["serve", "ledger"]
    assert with_django(["consume"], None) == ["consume"]  # settings configured in code
