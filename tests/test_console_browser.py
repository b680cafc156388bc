"""``ackledger console`` in a real browser: Debian's Chromium driven by Playwright, the console
a real process on a free loopback port, its databases real SQLite files (one test on
PostgreSQL), every effect read back from a separate connection."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger._dev.console_scene import REASONS, Scene, build
from ackledger._dev.console_shots import CHROMIUM, CHROMIUM_ARGS
from ackledger.ops.processes import Service, start_service

from .conftest import raw_rows

TOKEN = "console-test-token-0123456789"

pytestmark = pytest.mark.slow


def _require_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    message = f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set: the console's browser tests must run")
    pytest.skip(f"{message}; set CI=1 to make this a failure")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def _start_console(scene: Scene, workdir: Path) -> Service:
    token_file = workdir / "console.token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    args = ["console", "--source", scene.source, "--sink", scene.sink, "--ledger", scene.ledger]
    args += ["--port", "0", "--token-file", str(token_file)]
    return start_service(args, stderr_path=workdir / "console.log")


# One scene and one console for the SQLite tests (building and starting take seconds on a
# shared machine): each test writes only events no other test reads, and compares the page
# with the database as it is then, not with the scene as it was built.
@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    return build(tmp_path_factory.mktemp("console"))


@pytest.fixture(scope="module")
def console(scene: Scene) -> Iterator[Service]:
    service = _start_console(scene, Path(scene.source).parent)
    try:
        yield service
    finally:
        service.stop()


def _count(db: str, where: str) -> int:
    return int(
        str(raw_rows(Path(db), f"SELECT COUNT(*) FROM ackledger_outbox WHERE {where}")[0][0])
    )


def _figure(page: Any, key: str) -> str:
    return str(page.locator(f"tr[data-figure={key}] .value").inner_text())


def _quarantine_with_the_button(page: Any, base_url: str, event_id: str, reason: str) -> None:
    page.goto(base_url + "/events")
    row = page.locator(f"tr.pending[data-id='{event_id}']")
    row.locator("input[name=reason]").fill(reason)
    row.locator("input[name=token]").fill(TOKEN)
    row.locator("button").click()
    assert f"quarantined {event_id}" in page.locator("#done").inner_text()


def test_the_overview_shows_the_databases_figures_and_draws_the_chart(
    page: Any, console: Service, scene: Scene
) -> None:
    page.goto(console.base_url + "/")
    assert _figure(page, "pending") == str(_count(scene.source, "sent = 0 AND quarantined = 0"))
    assert _figure(page, "quarantined") == str(_count(scene.source, "quarantined = 1"))
    assert _figure(page, "sent") == str(_count(scene.source, "sent = 1"))
    assert _count(scene.source, "sent = 0 AND quarantined = 0") > 0  # not 0 == 0
    # The page's script fetched /samples.json and drew the pending line from its sample.
    page.wait_for_function("document.getElementById('span').textContent.includes('sample')")
    points = page.locator("#line-pending").get_attribute("points")
    assert points and len(points.split()) >= 1


def test_quarantine_and_requeue_with_the_buttons_write_the_outbox_log(
    page: Any, console: Service, scene: Scene
) -> None:
    _quarantine_with_the_button(page, console.base_url, "order-0009", "held by the browser test")
    assert raw_rows(
        Path(scene.source),
        "SELECT quarantined, sent FROM ackledger_outbox WHERE id = ?",
        ("order-0009",),
    ) == [(1, 0)]

    page.goto(console.base_url + "/events")
    group = page.locator(".group", has=page.locator(".reason", has_text="held by the browser test"))
    group.locator("tr[data-id='order-0009'] input[name=token]").fill(TOKEN)
    group.locator("tr[data-id='order-0009'] button").click()
    assert "requeued order-0009" in page.locator("#done").inner_text()
    assert raw_rows(
        Path(scene.source),
        "SELECT quarantined, sent FROM ackledger_outbox WHERE id = ?",
        ("order-0009",),
    ) == [(0, 0)]
    kinds = raw_rows(
        Path(scene.source), "SELECT kind FROM ackledger_outbox_log WHERE event_id = ? ORDER BY seq",
        ("order-0009",),
    )  # fmt: skip
    assert kinds == [("quarantined",), ("requeued",)]
    page.goto(console.base_url + "/events")
    assert page.locator("tr.pending[data-id='order-0009']").count() == 1


def test_a_wrong_token_is_refused_and_nothing_is_written(
    page: Any, console: Service, scene: Scene
) -> None:
    before = raw_rows(
        Path(scene.source), "SELECT id, quarantined FROM ackledger_outbox ORDER BY seq"
    )
    logged = "SELECT COUNT(*) FROM ackledger_outbox_log WHERE event_id = 'order-0008'"
    logged_before = raw_rows(Path(scene.source), logged)
    page.goto(console.base_url + "/events")
    row = page.locator("tr.quarantined[data-id='order-0008']")
    row.locator("input[name=token]").fill("not-the-token")
    with page.expect_response(re.compile(r"/requeue$")) as answer:
        row.locator("button").click()
    assert answer.value.status == 403
    assert "not the console's token" in page.locator("#message").inner_text()
    assert (
        raw_rows(Path(scene.source), "SELECT id, quarantined FROM ackledger_outbox ORDER BY seq")
        == before
    )
    assert raw_rows(Path(scene.source), logged) == logged_before


def test_quarantined_events_are_grouped_by_reason_and_a_group_requeues_at_once(
    page: Any, console: Service, scene: Scene
) -> None:
    page.goto(console.base_url + "/events")
    groups = page.locator(".group")
    assert groups.count() == 2
    # The largest group first, its reason shown as text, each event of it listed.
    assert groups.nth(0).locator(".reason").inner_text() == REASONS[0]
    assert groups.nth(0).locator("tr.quarantined").count() == 2
    groups.nth(0).locator("form[action='/requeue-group'] input[name=token]").fill(TOKEN)
    groups.nth(0).locator("form[action='/requeue-group'] button").click()
    assert page.locator("#done").inner_text().count("requeued") == 2
    rows = raw_rows(Path(scene.source), "SELECT id FROM ackledger_outbox WHERE quarantined = 1")
    assert rows == [("order-0008",)]


def test_the_trace_of_an_event_shows_every_stage_from_its_link(
    page: Any, console: Service, scene: Scene
) -> None:
    page.goto(console.base_url + "/events")
    page.locator("tr.pending[data-id='order-0006'] a").click()
    assert page.locator("#traced").inner_text() == "order-0006"
    stages = page.locator("#stages tr[data-stage]")
    assert [stages.nth(i).get_attribute("data-stage") for i in range(stages.count())] == [
        "accepted", "outbox", "sink", "ack", "sent",
    ]  # fmt: skip
    # order-0006 is in the sink's inbox (read here from the file) but not marked sent.
    receipts = raw_rows(
        Path(scene.sink), "SELECT COUNT(*) FROM ackledger_inbox WHERE id = ?", ("order-0006",)
    )
    assert receipts == [(1,)]
    assert page.locator("tr[data-stage=sink] td").nth(1).inner_text() == "yes"
    assert page.locator("tr[data-stage=ack] td").nth(1).inner_text() == "unknown"
    assert page.locator("tr[data-stage=sent] td").nth(1).inner_text() == "no"
    assert "re-sent and absorbed as a duplicate" in page.locator("#verdict").inner_text()


def test_reconcile_and_the_ledger_pages_show_what_the_databases_hold(
    page: Any, console: Service, scene: Scene
) -> None:
    page.goto(console.base_url + "/reconcile")
    assert page.locator("tr[data-class=applied_not_marked] .count").inner_text() == "1"
    assert page.locator("tr[data-class=marked_without_receipt] .count").inner_text() == "0"
    assert "consistent" in page.locator("#verdict").inner_text()
    page.goto(console.base_url + "/ledger?limit=3")
    deliveries = raw_rows(
        Path(scene.ledger), "SELECT delivery_no FROM ackledger_deliveries ORDER BY delivery_no"
    )
    shown = page.locator("tr.key")
    assert [int(shown.nth(i).get_attribute("data-delivery")) for i in range(3)] == [
        no for (no,) in deliveries[:3]
    ]
    first = deliveries[0][0]
    attempts = raw_rows(
        Path(scene.ledger),
        "SELECT COUNT(*) FROM ackledger_attempts WHERE delivery_no = ?",
        (first,),
    )
    assert shown.nth(0).locator(".attempt-count").inner_text() == str(attempts[0][0]) == "2"
    page.locator("#next").click()
    assert int(page.locator("tr.key").nth(0).get_attribute("data-delivery")) == deliveries[3][0]


@pytest.mark.postgres
def test_the_console_on_postgresql_quarantines_with_its_button(
    page: Any, pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    scene = build(tmp_path, source=pg_url)
    service = _start_console(scene, tmp_path)
    try:
        page.goto(service.base_url + "/")
        assert _figure(page, "pending") == "4"
        _quarantine_with_the_button(page, service.base_url, "order-0011", "held on PostgreSQL")
    finally:
        service.stop()
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            "SELECT quarantined, quarantine_reason FROM ackledger_outbox WHERE id = 'order-0011'"
        ).fetchall()
        logged = conn.execute(
            "SELECT kind FROM ackledger_outbox_log WHERE event_id = 'order-0011'"
        ).fetchall()
    assert found == [(1, "held on PostgreSQL")]
    assert logged == [("quarantined",)]


def test_the_real_process_answers_421_to_a_foreign_host_and_serves_loopback(
    console: Service,
) -> None:
    import http.client

    for host, status in (("rebound.example.invalid", 421), (f"127.0.0.1:{console.port}", 200)):
        conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
        try:
            conn.request("GET", "/events", headers={"Host": host})
            assert conn.getresponse().status == status, host
        finally:
            conn.close()
