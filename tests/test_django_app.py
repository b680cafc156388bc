"""``ackledger.django`` in a real Django project (tests/django_project), on SQLite and
PostgreSQL: its migration, ``publish`` in a view's transaction, ``receive`` with model
handlers, ``manage.py ackledger``, and the idempotency middleware. Every process is real and
every effect is read back from a separate connection."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger import Outbox, new_event
from ackledger.django.commands import with_database
from ackledger.ops.processes import start_service

from .djangohelp import KINDS, PROJECT, Project, project_on

pytestmark = pytest.mark.slow


@pytest.fixture(params=KINDS)
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Project]:
    yield from project_on(request.param, tmp_path)


TABLES = (
    "ackledger_outbox", "ackledger_inbox", "ackledger_deliveries", "ackledger_attempts",
    "ackledger_refused",
)  # fmt: skip


def _tables(project: Project) -> set[str]:
    if project.is_postgres:
        found = project.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    else:
        found = project.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {row[0] for row in found}


def _post(project: Project, path: str, body: dict[str, object], key: str | None = None) -> str:
    """POST through Django's test client in the project's process: "STATUS BODY" lines."""
    headers = {} if key is None else {"Idempotency-Key": key}
    return project.shell(
        "import json\n"
        "from django.test import Client\n"
        "client = Client(raise_request_exception=False)\n"
        f"answer = client.post({path!r}, {json.dumps(body)!r}, content_type='application/json',"
        f" headers={headers!r})\n"
        "print(answer.status_code, answer.headers.get('Idempotent-Replayed', '-'),"
        " answer.content.decode())\n"
    )


def test_migrate_makes_the_tables_in_djangos_history(project: Project) -> None:
    project.manage("migrate")
    assert set(TABLES) <= _tables(project)
    assert project.rows(
        "SELECT name FROM django_migrations WHERE app = 'ackledger' ORDER BY name"
    ) == [("0001_initial",), ("0002_inbox_names",), ("0003_refused",)]
    # ackledger's own migrator made them: its history says so, nothing left to apply.
    assert project.rows("SELECT count(*) FROM ackledger_schema_migrations")[0][0] >= 12
    assert "No changes detected" in project.manage("makemigrations", "--check", "--dry-run").stdout
    # The lab's tables are not ackledger's: a Django project never gets them.
    assert not {"orders", "inventory"} & _tables(project)


def test_migrate_adopts_a_database_ackledger_made(project: Project) -> None:
    with Outbox(project.db, source="/shop") as outbox:
        outbox.publish(
            new_event("com.example.order.placed", {"n": 1}, source="/shop", id="before-django")
        )
    before = project.rows("SELECT version FROM ackledger_schema_migrations ORDER BY version")
    project.manage("migrate")
    assert project.rows("SELECT version FROM ackledger_schema_migrations ORDER BY version") == (
        before
    )
    assert project.rows("SELECT id, sent FROM ackledger_outbox") == [("before-django", 0)]
    assert project.rows("SELECT value FROM ackledger_meta WHERE name = 'outbox.source'") == [
        ("/shop",)
    ]
    # Migrating again (a second deploy) changes nothing either.
    project.manage("migrate", "ackledger", "zero")
    project.manage("migrate")
    assert project.rows("SELECT id FROM ackledger_outbox") == [("before-django",)]


def test_a_view_saves_the_order_and_its_event_together(project: Project) -> None:
    project.manage("migrate")
    assert _post(project, "/orders", {"number": "1", "sku": "tea", "qty": 2}).startswith("201")
    # The view raises after saving and publishing: ATOMIC_REQUESTS rolls both back.
    assert _post(project, "/orders/failing", {"number": "2", "sku": "tea", "qty": 1}).startswith(
        "500"
    )
    assert project.rows("SELECT number FROM shop_order") == [("1",)]
    events = project.rows("SELECT id, source, sent FROM ackledger_outbox")
    assert events == [("order-1", "/shop", 0)]


def test_publish_outside_an_atomic_block_writes_nothing(project: Project) -> None:
    project.manage("migrate")
    out = project.shell(
        "import ackledger.django\n"
        "try:\n"
        "    ackledger.django.publish({'type': 'com.example.x', 'id': 'loose', 'data': {}})\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    assert "not inside transaction.atomic()" in out
    assert project.rows("SELECT count(*) FROM ackledger_outbox") == [(0,)]


def test_receive_commits_the_models_write_with_the_receipt(project: Project) -> None:
    project.manage("migrate")
    out = project.shell(
        "from ackledger import new_event\n"
        "import ackledger.django\n"
        "def placed(number, sku):\n"
        "    return new_event('com.example.order.placed', {'order': number, 'sku': sku,"
        " 'qty': 1}, source='/shop', id='order-' + number)\n"
        "print(ackledger.django.receive(placed('7', 'tea')))\n"
        "print(ackledger.django.receive(placed('7', 'tea')))\n"
        "try:\n"
        "    ackledger.django.receive(placed('8', 'out-of-stock'))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
        "try:\n"
        "    ackledger.django.receive(placed('7', 'coffee'))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    assert out.split() == ["applied", "duplicate", "OutOfStockError", "Conflict"]
    # The raising handler had saved its shipment: rolled back with its receipt.
    assert project.rows("SELECT order_number FROM shop_shipment") == [("7",)]
    assert project.rows("SELECT id, receipts FROM ackledger_inbox") == [("order-7", 2)]


def test_the_newest_django_migration_names_the_newest_schema_version() -> None:
    import importlib
    import pkgutil

    import ackledger.django.migrations as package
    from ackledger.store.base import migrations

    newest = max(info.name for info in pkgutil.iter_modules(package.__path__))
    found = importlib.import_module(f"{package.__name__}.{newest}").SCHEMA_VERSION
    for dialect in ("sqlite", "postgres"):
        assert found == migrations(dialect)[-1][0], (
            "ackledger's schema has a newer migration: add a Django migration that runs "
            "the migrator again (manage.py migrate would leave the tables behind)"
        )


def test_the_database_option_each_command_gets() -> None:
    db = "/srv/shop.db"
    assert with_database(["relay", "--to", "http://x/events"], db) == [
        "relay", "--source", db, "--to", "http://x/events"
    ]  # fmt: skip
    assert with_database(["serve", "sink", "--port", "0"], db) == [
        "serve", "sink", "--db", db, "--port", "0"
    ]  # fmt: skip
    assert with_database(["inbox", "purge"], db) == ["inbox", "purge", "--db", db]
    assert with_database(["migrate"], db) == ["migrate", "--target", db]
    # Given on the command line, it stays as given; a command without one is left alone.
    assert with_database(["status", "--source=/other.db"], db) == ["status", "--source=/other.db"]
    assert with_database(["demo"], db) == ["demo"]


def test_manage_py_ackledger_takes_the_database_from_settings(project: Project) -> None:
    project.manage("migrate")
    _post(project, "/orders", {"number": "1", "sku": "tea", "qty": 2})
    status = json.loads(project.manage("ackledger", "status", "--json").stdout)
    assert status["pending"] == 1
    project.manage("ackledger", "quarantine", "order-1", "--reason", "address unknown")
    assert json.loads(project.manage("ackledger", "status", "--json").stdout)["quarantined"] == 1
    project.manage("ackledger", "requeue", "order-1")
    kinds = project.rows("SELECT kind FROM ackledger_outbox_log ORDER BY seq")
    assert kinds == [("quarantined",), ("requeued",)]
    # Settings that name no usable database: one line, exit status 2, as the CLI's errors.
    memory = project.manage("ackledger", "status", env={"SHOP_DB": ":memory:"}, check=False)
    assert (memory.returncode, memory.stderr.count("\n")) == (2, 1), memory.stderr
    assert "ackledger needs a SQLite file" in memory.stderr
    # Bad input: the command line's own one-line error and exit status.
    bad = project.manage("ackledger", "quarantine", "no-such-event", "--reason", "x", check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("ackledger: error:")


def test_manage_py_ackledger_relay_sends_and_stops_on_sigterm(
    project: Project, tmp_path: Path
) -> None:
    project.manage("migrate")
    for number in ("1", "2", "3"):
        _post(project, "/orders", {"number": number, "sku": "tea", "qty": 1})
    sink_db = tmp_path / "sink.db"
    sink = start_service(
        ["serve", "sink", "--db", str(sink_db), "--port", "0", "--handlers",
         "tests.djangohelp:SINK_HANDLERS"],
        stderr_path=tmp_path / "sink.log",
    )  # fmt: skip
    try:
        relay = project.start("ackledger", "relay", "--to", f"{sink.base_url}/events")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if project.rows("SELECT count(*) FROM ackledger_outbox WHERE sent = 0") == [(0,)]:
                break
            time.sleep(0.1)
        relay.send_signal(signal.SIGTERM)
        out, _ = relay.communicate(timeout=30)
    finally:
        sink.stop()
    assert relay.returncode == 0, out
    assert "stopped" in out
    assert project.rows("SELECT count(*) FROM ackledger_outbox WHERE sent = 1") == [(3,)], out


def test_the_idempotency_middleware_runs_a_view_once_per_key(project: Project) -> None:
    project.manage("migrate")
    body = {"number": "5", "sku": "tea", "qty": 1}
    first = _post(project, "/orders", body, key='"order-5-try"')
    again = _post(project, "/orders", body, key='"order-5-try"')
    other = _post(project, "/orders", {**body, "qty": 2}, key='"order-5-try"')
    bad = _post(project, "/orders", body, key='"unterminated')
    assert first.split()[:2] == ["201", "-"]
    assert again.split()[:2] == ["201", "true"]
    assert again.split(maxsplit=2)[2] == first.split(maxsplit=2)[2]
    assert other.startswith("422")
    assert bad.startswith("400")
    # The view ran once: one order, one event.
    assert project.rows("SELECT number FROM shop_order") == [("5",)]
    assert project.rows("SELECT count(*) FROM ackledger_outbox") == [(1,)]


def test_ackledger_on_an_alias_of_its_own(project: Project, tmp_path: Path) -> None:
    ledger = Project(str(tmp_path / "ledger.db"))
    alone = {"SHOP_LEDGER_DB": ledger.db}
    project.manage("migrate", env=alone)
    project.manage("migrate", "--database", "ledger", env=alone)
    assert not set(TABLES) & _tables(project)
    assert set(TABLES) <= _tables(ledger)
    assert ledger.rows(
        "SELECT name FROM django_migrations WHERE app = 'ackledger' ORDER BY name"
    ) == [("0001_initial",), ("0002_inbox_names",), ("0003_refused",)]
    # publish writes on ackledger's alias: an atomic block on another alias is not one.
    out = project.shell(
        "from django.db import transaction\n"
        "import ackledger.django\n"
        "event = {'type': 'com.example.x', 'source': '/shop', 'id': 'e-0', 'data': {}}\n"
        "try:\n"
        "    with transaction.atomic():\n"
        "        ackledger.django.publish(event)\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
        "with transaction.atomic(using='ledger'):\n"
        "    ackledger.django.publish({'type': 'com.example.x', 'source': '/shop', 'id': 'e-1',"
        " 'data': {}})\n"
        "from ackledger.django.models import OutboxEvent\n"
        "print(list(OutboxEvent.objects.values_list('event_id', flat=True)))\n",
        env=alone,
    )
    assert "not inside transaction.atomic() on the database 'ledger'" in out
    assert out.strip().splitlines()[-1] == "['e-1']"
    assert (
        json.loads(project.manage("ackledger", "status", "--json", env=alone).stdout)["pending"]
        == 1
    )
    # Without the router, the system check says what is missing.
    refused = project.manage("check", env={**alone, "SHOP_ROUTER": "none"}, check=False)
    assert refused.returncode != 0
    assert "ackledger.E002" in refused.stderr


def test_the_middlewares_options_come_from_settings(project: Project) -> None:
    project.manage("migrate")
    required = {"SHOP_IDEMPOTENCY": json.dumps({"methods": ["POST"], "required": True})}
    body = {"number": "6", "sku": "tea", "qty": 1}
    missing = project.shell(
        "import json\n"
        "from django.test import Client\n"
        "answer = Client().post('/orders', json.dumps("
        f"{body!r}), content_type='application/json')\n"
        "print(answer.status_code, json.loads(answer.content)['type'])\n",
        env=required,
    )
    assert missing.split() == ["400", "https://ackledger.invalid/problems/idempotency-key-missing"]
    assert project.rows("SELECT count(*) FROM shop_order") == [(0,)]
    # A misspelt option is a system check's error, before any request.
    typo = {"SHOP_IDEMPOTENCY": json.dumps({"method": ["POST"]})}
    refused = project.manage("check", env=typo, check=False)
    assert refused.returncode != 0
    assert "unknown option(s) method" in refused.stderr


def test_the_projects_own_tests_run_on_djangos_test_database(project: Project) -> None:
    # shop/tests.py: ackledger's migration in the test database, publish in a TestCase; on
    # PostgreSQL the runner can drop the test database at the end (ackledger's own
    # connections closed first by ackledger.django.test_runner).
    done = project.manage("test", "shop", "--noinput", check=False)
    assert done.returncode == 0, done.stderr
    assert "Ran 1 test" in done.stderr


def test_the_events_views_answer_as_the_sink_does(project: Project) -> None:
    project.manage("migrate")
    out = project.shell(
        "import json\n"
        "from django.test import Client\n"
        "client = Client()\n"
        "def placed(number, sku):\n"
        "    return {'specversion': '1.0', 'type': 'com.example.order.placed', 'source': '/shop',"
        " 'id': 'order-' + number, 'data': {'order': number, 'sku': sku, 'qty': 1}}\n"
        "def post(path, body, kind):\n"
        "    answer = client.post(path, json.dumps(body), content_type=kind)\n"
        "    print(answer.status_code, answer.headers.get('Idempotent-Replayed', '-'),"
        " answer.content.decode())\n"
        "one = 'application/cloudevents+json'\n"
        "many = 'application/cloudevents-batch+json'\n"
        "post('/events', placed('1', 'tea'), one)\n"
        "post('/events', placed('1', 'tea'), one)\n"
        "post('/events', placed('1', 'coffee'), one)\n"
        "post('/events', placed('2', 'out-of-stock'), one)\n"
        "post('/events', {**placed('3', 'tea'), 'type': 'com.example.unknown'}, one)\n"
        "post('/events/batch', [placed('4', 'tea'), placed('5', 'out-of-stock'),"
        " placed('6', 'tea')], many)\n"
        "post('/events/batch', [placed('7', 'tea'), {'id': 'broken'}], many)\n"
    )
    lines = [line.split(" ", 2) for line in out.strip().splitlines()]
    assert [line[:2] for line in lines] == [
        ["200", "-"], ["200", "true"], ["422", "-"], ["503", "-"], ["422", "-"], ["200", "-"],
        ["400", "-"],
    ]  # fmt: skip
    assert json.loads(lines[0][2]) == {
        "ack": True, "id": "order-1", "source": "/shop", "status": "applied"
    }  # fmt: skip
    batch = json.loads(lines[5][2])
    assert [ack["id"] for ack in batch["acks"]] == ["order-4"]
    assert batch["error"]["status"] == 503
    # Applied: 1 and the batch's prefix (4); the failing handler's, the rest of the batch and
    # the invalid batch left nothing, receipts included.
    shipped = project.rows("SELECT order_number FROM shop_shipment ORDER BY order_number")
    assert shipped == [("1",), ("4",)]
    received = project.rows("SELECT id FROM ackledger_inbox ORDER BY id")
    assert received == [("order-1",), ("order-4",)]


RECEIVE_SLOW = (
    "import ackledger.django\n"
    "event = {'specversion': '1.0', 'type': 'com.example.order.placed', 'source': '/shop',"
    " 'id': 'order-50', 'data': {'order': '50', 'sku': 'tea', 'qty': 1, 'pause': 2}}\n"
    "try:\n"
    "    print(ackledger.django.receive(event))\n"
    "except Exception as exc:\n"
    "    print(type(exc).__name__)\n"
)


@pytest.mark.parametrize("first_fails", [False, True], ids=["first-commits", "first-fails"])
def test_two_receivers_of_one_event_at_once(project: Project, first_fails: bool) -> None:
    project.manage("migrate")
    first = subprocess.Popen(
        project.manage_command("shell", "--no-imports", "-c", RECEIVE_SLOW),
        env=project.env_with({"SHOP_FAIL_AFTER_PAUSE": "1"} if first_fails else None),
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        # The first holds the receipt and its shipment, uncommitted, for two seconds.
        while "handling" not in first.stderr.readline():
            assert first.poll() is None, "the first receiver ended before its handler ran"
        second = project.shell(RECEIVE_SLOW).strip().splitlines()[-1]
        first_out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    if first_fails:
        # Rolled back: the second, which waited for it, applies.
        assert (first_out.strip(), second) == ("OutOfStockError", "applied")
    else:
        # Committed: the second, which waited for it, is a duplicate and ran nothing.
        assert (first_out.strip(), second) == ("applied", "duplicate")
    assert project.rows("SELECT order_number FROM shop_shipment") == [("50",)]
    assert project.rows("SELECT id, receipts FROM ackledger_inbox") == [
        ("order-50", 1 if first_fails else 2)
    ]
