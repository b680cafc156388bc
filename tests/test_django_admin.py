"""The admin of ``ackledger.django`` in a real browser: Debian's Chromium driven by Playwright
against the test project served by ``manage.py runserver`` (a real process on loopback), on a
real SQLite file and a PostgreSQL database; every action's effect is read back from a
separate connection. It also makes the screenshot that docs/integrations/django.md shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox
from ackledger._dev.console_shots import CHROMIUM, CHROMIUM_ARGS

from .djangohelp import KINDS, Project, free_port, project_on
from .test_console_browser import _require_chromium

pytestmark = pytest.mark.slow

SHOT = Path(__file__).parents[1] / "docs" / "img" / "django-admin.png"
PASSWORD = "admin-test-password-0123"


@pytest.fixture(params=KINDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Project, str]]:
    for project in project_on(request.param, tmp_path):
        yield from _serve(project)


def _serve(project: Project) -> Iterator[tuple[Project, str]]:
    project.manage("migrate")
    project.shell(
        "import json\n"
        "from django.contrib.auth.models import User\n"
        f"User.objects.create_superuser('admin', 'admin@example.com', {PASSWORD!r})\n"
        "from django.test import Client\n"
        "client = Client()\n"
        "for number, sku in (('1', 'tea'), ('2', 'coffee'), ('3', 'cocoa')):\n"
        "    body = json.dumps({'number': number, 'sku': sku, 'qty': 1})\n"
        "    client.post('/orders', body, content_type='application/json')\n"
        "import ackledger.django\n"
        "ackledger.django.receive({'specversion': '1.0', 'type': 'com.example.order.placed',"
        " 'source': '/shop', 'id': 'order-9', 'data': {'order': '9', 'sku': 'tea', 'qty': 1}})\n"
    )
    with Outbox(project.db) as outbox:
        outbox.mark_sent("order-1")
    port = free_port()
    server = project.runserver(port, "--insecure")
    try:
        yield project, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def page() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": 560})
        finally:
            browser.close()


def _ids_listed(page: Any) -> list[str]:
    return [cell.inner_text().strip() for cell in page.locator("#result_list td.field-event_id")
            .all()]  # fmt: skip


def _act(page: Any, event_id: str, action: str) -> None:
    row = page.locator("#result_list tr", has_text=event_id)
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def _log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def test_the_admin_filters_quarantines_and_requeues(served: tuple[Project, str], page: Any) -> None:
    project, base = served
    _log_in(page, base)
    changelist = f"{base}/admin/ackledger/outboxevent/"

    page.goto(f"{changelist}?state=pending")
    assert sorted(_ids_listed(page)) == ["order-2", "order-3"]
    page.goto(f"{changelist}?state=sent")
    assert _ids_listed(page) == ["order-1"]
    page.goto(f"{changelist}?q=order-3")
    assert _ids_listed(page) == ["order-3"]

    page.goto(f"{changelist}?state=pending")
    _act(page, "order-2", "quarantine")
    page.fill("#id_reason", "address unknown")
    page.click("input[type=submit][value=Quarantine]")
    page.wait_for_selector("ul.messagelist")
    assert "Quarantined order-2" in page.inner_text("ul.messagelist")
    assert project.rows(
        "SELECT quarantined, quarantine_reason FROM ackledger_outbox WHERE id = 'order-2'"
    ) == [(1, "address unknown")]
    # The same log entry ``ackledger quarantine`` writes.
    logged = project.rows(
        "SELECT kind, detail FROM ackledger_outbox_log WHERE event_id = 'order-2'"
    )
    assert [(kind, json.loads(detail)) for kind, detail in logged] == [
        ("quarantined", {"reason": "address unknown"})
    ]

    page.goto(f"{changelist}?state=quarantined")
    assert _ids_listed(page) == ["order-2"]
    if not project.is_postgres:  # one picture for the docs
        page.goto(changelist)
        SHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOT))

    page.goto(f"{changelist}?state=quarantined")
    _act(page, "order-2", "requeue")
    page.wait_for_selector("ul.messagelist")
    assert "Requeued order-2" in page.inner_text("ul.messagelist")
    assert project.rows("SELECT quarantined FROM ackledger_outbox WHERE id = 'order-2'") == [(0,)]
    kinds = project.rows(
        "SELECT kind FROM ackledger_outbox_log WHERE event_id = 'order-2' ORDER BY seq"
    )
    assert kinds == [("quarantined",), ("requeued",)]
    # The receipts are read-only: no add button, no change form.
    page.goto(f"{base}/admin/ackledger/inboxreceipt/")
    assert page.locator("#result_list td.field-source").all_inner_texts() == ["/shop"]
    assert page.locator("#result_list td.field-name").all_inner_texts() == ["default"]
    assert page.locator("a.addlink[href*=inboxreceipt]").count() == 0
    assert page.locator("input.action-select").count() == 0


#: What the message reader says of a body that is not JSON (a replay refuses it with these words).
NOT_JSON = "body: not valid JSON (Expecting value: line 1 column 1 (char 0))"


def _refuse(db: str, message: bytes, reason: str, identity: tuple[str, str] | None) -> None:
    """What a consumer keeps of a message it refused for good (``consume`` records it so)."""
    event_id, source = identity if identity is not None else (None, None)
    with Inbox(db) as inbox, inbox.backend.write() as tx:
        tx.refused_record(event_id, source, reason, message=message, content_type=None, now=1.0)


def test_the_admin_lists_refused_messages_and_replays_them(
    served: tuple[Project, str], page: Any
) -> None:
    project, base = served
    late = {
        "specversion": "1.0", "type": "com.example.order.placed", "source": "/shop",
        "id": "order-10", "data": {"order": "10", "sku": "tea", "qty": 2},
    }  # fmt: skip
    _refuse(project.db, json.dumps(late).encode(), "NoHandler: no handler for its type",
            ("order-10", "/shop"))  # fmt: skip
    _refuse(project.db, b"not json", NOT_JSON, None)
    _log_in(page, base)
    changelist = f"{base}/admin/ackledger/refusedmessage/"

    page.goto(changelist)
    reasons = page.locator("#result_list td.field-reason").all_inner_texts()
    assert reasons == [NOT_JSON, "NoHandler: no handler for its type"]
    assert page.locator("a.addlink[href*=refusedmessage]").count() == 0
    _act(page, "order-10", "replay")
    page.wait_for_selector("ul.messagelist")
    assert "applied, removed from the list" in page.inner_text("ul.messagelist")
    # Applied through the settings' handlers, in the receipt's transaction; off the list.
    assert project.rows("SELECT qty FROM shop_shipment WHERE order_number = '10'") == [(2,)]
    assert project.rows("SELECT id FROM ackledger_inbox WHERE id = 'order-10'") == [("order-10",)]
    assert project.rows("SELECT reason FROM ackledger_refused") == [(NOT_JSON,)]

    page.goto(changelist)
    _act(page, "not valid JSON", "replay")
    page.wait_for_selector("ul.messagelist")
    assert "refused again" in page.inner_text("ul.messagelist")
    assert project.rows("SELECT refusals FROM ackledger_refused") == [(2,)]
    # The command line's listing, on the database of settings.
    listed = json.loads(project.manage("ackledger", "refused", "list", "--json").stdout)
    assert [(row["id"], row["refusals"]) for row in listed] == [(None, 2)]
