"""``ackledger console`` asked in-process (its real app on real SQLite files, behind the same
Guard the command puts in front of it): the refusals and the escaping, cheaply. The browser
tests (test_console_browser.py) drive the page itself."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ackledger._dev.console_scene import Scene, build
from ackledger.ops.console.app import Console, create_console_app
from ackledger.ops.processes import run_cli
from ackledger.source.outbox import Outbox
from ackledger.web.guard import Guard
from ackledger.wire.token import Token

from .conftest import raw_rows
from .inprocess import InProcess
from .test_cli import assert_one_line_error

TOKEN = "in-process-console-token-42"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
EVIL = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    return build(tmp_path_factory.mktemp("scene"))


@pytest.fixture
def scene(built: Scene, tmp_path: Path) -> Scene:
    """A copy of the built scene's files for one test (it may write)."""
    copies = []
    for name in (built.source, built.sink, built.ledger):
        copy = tmp_path / Path(name).name
        copy.write_bytes(Path(name).read_bytes())
        copies.append(str(copy))
    return Scene(*copies)


def _client(scene: Scene, token: str | None = TOKEN) -> Iterator[InProcess]:
    from ackledger.ledger.ledger import Ledger

    with Outbox(scene.source) as outbox, Ledger(scene.ledger) as ledger:
        console = Console(
            scene.source, outbox, sink=scene.sink, ledger=ledger,
            token=None if token is None else Token(token),
        )  # fmt: skip
        # What the command serves on loopback: Host check on, the token checked by the app.
        with InProcess(Guard(create_console_app(console), loopback=True)) as app:
            yield app


@pytest.fixture
def app(scene: Scene) -> Iterator[InProcess]:
    yield from _client(scene)


def _post(app: InProcess, path: str, body: str, **headers: str) -> httpx.Response:
    return app.send("POST", path, body.encode(), {**FORM, "Host": "127.0.0.1:8090", **headers})


def _get(app: InProcess, path: str) -> httpx.Response:
    return app.send("GET", path, headers={"Host": "127.0.0.1:8090"})


def _state(scene: Scene) -> list[tuple[object, ...]]:
    return raw_rows(
        Path(scene.source), "SELECT id, sent, quarantined FROM ackledger_outbox ORDER BY seq"
    )


def _log(scene: Scene) -> list[tuple[object, ...]]:
    return raw_rows(
        Path(scene.source), "SELECT event_id, kind FROM ackledger_outbox_log ORDER BY seq"
    )


@pytest.mark.parametrize("token", [None, "", "wrong-token-0000", TOKEN + "x"])
def test_a_button_without_the_token_is_403_and_writes_nothing(
    app: InProcess, scene: Scene, token: str | None
) -> None:
    before, logged = _state(scene), _log(scene)
    body = "id=order-0009&reason=held" + ("" if token is None else f"&token={token}")
    answer = _post(app, "/quarantine", body)
    assert answer.status_code == 403
    assert "token" in answer.text
    assert TOKEN not in answer.text
    assert _state(scene) == before
    assert _log(scene) == logged


def test_the_token_as_a_bearer_header_is_taken(app: InProcess, scene: Scene) -> None:
    answer = _post(app, "/requeue", "id=order-0008", Authorization=f"Bearer {TOKEN}")
    assert answer.status_code == 200, answer.text
    assert "requeued order-0008" in answer.text
    assert _log(scene)[-1] == ("order-0008", "requeued")


def test_a_write_from_another_origin_is_refused_even_with_the_token(
    app: InProcess, scene: Scene
) -> None:
    before = _state(scene)
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        answer = _post(app, "/requeue", f"id=order-0008&token={TOKEN}", **headers)
        assert answer.status_code == 403, headers
    assert _state(scene) == before
    # The console's own origin is the one that may write.
    own = _post(app, "/requeue", f"id=order-0008&token={TOKEN}", Origin="http://127.0.0.1:8090")
    assert own.status_code == 200


def test_a_host_that_is_not_loopback_is_421(app: InProcess) -> None:
    for path in ("/", "/events"):
        answer = app.send("GET", path, headers={"Host": "rebound.example.invalid"})
        assert answer.status_code == 421
    refused = _post(app, "/requeue", f"id=order-0008&token={TOKEN}", Host="rebound.invalid")
    assert refused.status_code == 421


def test_a_bad_or_unknown_event_id_is_404(app: InProcess, scene: Scene) -> None:
    for event_id in ("no-such-event", "%3Cscript%3E", "a%20b"):
        answer = _get(app, f"/trace?id={event_id}")
        assert answer.status_code == 404, event_id
    assert _get(app, "/trace").status_code == 400
    assert _get(app, "/trace?id=order-0001").status_code == 200
    unknown = _post(app, "/requeue", f"id=no-such-event&token={TOKEN}")
    assert unknown.status_code == 404
    not_quarantined = _post(app, "/requeue", f"id=order-0001&token={TOKEN}")
    assert not_quarantined.status_code == 409
    assert _log(scene)[-1][1] == "quarantined"  # the scene's own entries only


def test_a_reason_with_markup_is_shown_as_text(app: InProcess, scene: Scene) -> None:
    answer = _post(app, "/quarantine", f"id=order-0011&reason={EVIL}&token={TOKEN}")
    assert answer.status_code == 200
    stored = raw_rows(
        Path(scene.source), "SELECT quarantine_reason FROM ackledger_outbox WHERE id = 'order-0011'"
    )
    assert stored == [(EVIL,)]
    for path in ("/events", "/trace?id=order-0011"):
        page = _get(app, path).text
        assert EVIL not in page
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
        # Only the page's own scripts run: the policy names a nonce, new on every answer.
        policy = _get(app, path).headers["content-security-policy"]
        script = next(part for part in policy.split(";") if "script-src" in part)
        assert "'nonce-" in script and "unsafe-inline" not in script


def test_a_console_without_a_token_is_read_only(scene: Scene) -> None:
    for app in _client(scene, token=None):
        before = _state(scene)
        assert _get(app, "/events").status_code == 200
        answer = _post(app, "/requeue", "id=order-0008&token=anything-at-all")
        assert answer.status_code == 403
        assert "read-only" in answer.text
        assert _state(scene) == before


def test_the_samples_grow_while_the_console_runs(app: InProcess, scene: Scene) -> None:
    first = _get(app, "/samples.json").json()["samples"]
    assert [sample["pending"] for sample in first] == [4.0]
    with Outbox(scene.source) as outbox:
        outbox.accept({"id": "order-0100", "sku": "SKU-1", "qty": 1})
    time.sleep(1.05)  # samples are at most one a second (not a timing assertion)
    later = _get(app, "/samples.json").json()["samples"]
    assert [sample["pending"] for sample in later] == [4.0, 5.0]


def test_the_ledger_page_refuses_a_bad_cursor(app: InProcess) -> None:
    assert _get(app, "/ledger?after=-1").status_code == 400
    assert _get(app, "/ledger?after=1&after=2").status_code == 400
    assert _get(app, "/ledger?limit=2").status_code == 200


def test_the_command_refuses_bad_input_in_one_line(tmp_path: Path, built: Scene) -> None:
    assert_one_line_error(
        run_cli("console", "--source", str(tmp_path / "missing.db")), "--source", "no database"
    )
    assert_one_line_error(
        run_cli("console", "--source", built.source, "--host", "0.0.0.0", "--port", "0"),
        "--token-file",
    )
    assert_one_line_error(
        run_cli("console", "--source", built.source, "--ledger", "http://127.0.0.1:1/"),
        "--ledger",
    )


def test_the_reconcile_page_names_the_groups_as_the_command_does(app: InProcess) -> None:
    page = _get(app, "/reconcile")
    assert page.status_code == 200
    for name in ("applied_not_marked", "marked_without_receipt", "unknown_to_outbox"):
        assert f'data-class="{name}"' in page.text


def test_the_reconcile_page_reads_the_inbox_name_it_was_given(scene: Scene) -> None:
    """The scene's receipts moved to the inbox named billing: the default inbox has none (every
    sent event is then an alarm), the billing console sees the scene as it was."""
    from ackledger.ledger.ledger import Ledger

    def counts(inbox_name: str) -> list[str]:
        with Outbox(scene.source) as outbox, Ledger(scene.ledger) as ledger:
            console = Console(
                scene.source, outbox, sink=scene.sink, inbox_name=inbox_name, ledger=ledger
            )
            with InProcess(Guard(create_console_app(console), loopback=True)) as app:
                page = _get(app, "/reconcile")
        assert page.status_code == 200
        return re.findall(r'<td class="num count">([^<]*)</td>', page.text)

    before = counts("default")
    conn = sqlite3.connect(scene.sink)
    try:
        conn.execute("UPDATE ackledger_inbox SET name = 'billing'")
        conn.commit()
    finally:
        conn.close()
    assert counts("billing") == before
    assert counts("default") != before


@pytest.mark.parametrize(
    "reason",
    ["%FF%FEheld", "caf%C3", "line%0Abreak", "tab%09here", "x" * 2001],
    ids=["invalid-utf8", "cut-utf8", "newline", "tab", "too-long"],
)
def test_an_invalid_reason_is_400_and_nothing_is_stored(
    app: InProcess, scene: Scene, reason: str
) -> None:
    before, logged = _state(scene), _log(scene)
    answer = _post(app, "/quarantine", f"id=order-0009&reason={reason}&token={TOKEN}")
    assert answer.status_code == 400, answer.text
    assert "reason" in answer.text or "UTF-8" in answer.text
    assert _state(scene) == before and _log(scene) == logged
    stored = raw_rows(Path(scene.source), "SELECT quarantine_reason FROM ackledger_outbox")
    assert not any("\ufffd" in str(row[0]) for row in stored)


def test_the_token_is_judged_before_the_rest_of_the_form(app: InProcess, scene: Scene) -> None:
    """Whoever lacks the token learns nothing of how the form would have been judged: the
    refusal is the token's (403), whatever the rest of the body holds."""
    before = _state(scene)
    bad_rest = "id=order-0009&reason=%FF&reason=twice&" + "&".join(f"f{n}=x" for n in range(30))
    for body, headers in [
        (bad_rest, {}),  # no token at all
        (bad_rest + "&token=wrong-token-0000", {}),
        (bad_rest, {"Authorization": "Bearer wrong-token-0000"}),
        ("\udcff".encode("utf-8", "surrogateescape").decode("latin-1"), {}),
    ]:
        answer = _post(app, "/quarantine", body, **headers)
        assert answer.status_code == 403, (body[:40], answer.text)
    # A wrong Bearer is refused before the body is read: even one over the cap.
    huge = "reason=" + "x" * (64 * 1024)
    assert _post(app, "/quarantine", huge, Authorization="Bearer wrong").status_code == 403
    # Without a Bearer the form's token must be read, so the cap comes first.
    assert _post(app, "/quarantine", huge + f"&token={TOKEN}").status_code == 413
    assert _state(scene) == before
    # With the token, the rest is judged: the same bad body is 400 now.
    assert _post(app, "/quarantine", bad_rest + f"&token={TOKEN}").status_code == 400


def test_a_read_only_console_refuses_before_reading_the_form(scene: Scene) -> None:
    for app in _client(scene, token=None):
        huge = "reason=" + "x" * (64 * 1024)
        answer = _post(app, "/quarantine", huge)
        assert answer.status_code == 403 and "read-only" in answer.text


def test_the_overview_shows_a_partition_held_by_a_relay_s_lease(
    scene: Scene, app: InProcess
) -> None:
    from ackledger.relay.leases import PartitionLeases

    with Outbox(scene.source) as outbox:
        before = outbox.stats()["pending"]
        assert before > 0
        lease = PartitionLeases(outbox, "relay-gone", ttl=120).claim()
        assert lease is not None
    page = _get(app, "/").text
    assert "partitions held by a lease" in page
    assert f"held by a lease of relay-gone until {time.strftime('%Y-%m-%d')}" in page
    assert f'data-partition="{lease.partition}"' in page


def test_refused_messages_are_listed_traced_and_an_alarm(app: InProcess, scene: Scene) -> None:
    from ackledger import Inbox, new_event

    event = new_event("com.example.late", {"n": 1}, source="/shop", id="late-1")
    with Outbox(scene.source) as outbox:
        outbox.publish(event)
        outbox.mark_sent("late-1")
    with Inbox(scene.sink) as inbox, inbox.backend.write() as tx:
        tx.refused_record("late-1", "/shop", f"NoHandler: {EVIL}", message=b"{}",
                          content_type=None, now=time.time())  # fmt: skip
        tx.refused_record(None, None, "body: not JSON", message=b"\xff", content_type=None,
                          now=time.time())  # fmt: skip
    page = _get(app, "/events").text
    assert '<span id="refused-total">2</span>' in page
    assert "(unreadable)" in page and 'href="/trace?id=late-1"' in page
    assert EVIL not in page and "NoHandler: &lt;script&gt;" in page
    traced = _get(app, "/trace?id=late-1").text
    assert "refused at the sink" in traced and "ackledger refused replay 1 --db" in traced
    reconciled = _get(app, "/reconcile").text
    assert 'data-class="refused_at_sink"' in reconciled
