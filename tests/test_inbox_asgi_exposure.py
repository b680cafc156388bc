"""``inbox.asgi(token=..., allowed_hosts=...)`` mounted at ``/shipping`` in a user's FastAPI app,
served by a real uvicorn process: CONTRACT §9's front door on the mounted routes only (Host
check with the names allowed, bearer token, open probes), and every HTTP sender reaching the
inbox at ``/shipping/events``: ``send_http``, ``send_http_batch``, ``dispatch`` and a running
``relay`` (one event a request and batches), each event applied once. The test talks to the
app only over loopback and reads the databases on connections of its own.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox, new_event, send_http, send_http_batch
from ackledger.ops.processes import run_cli
from tests.conftest import raw_rows
from tests.opshelp import start_relay, uvicorn_serving, wait_until

pytestmark = pytest.mark.slow

SHIPPED = "com.example.order.placed"
TOKEN = "s3cret-token.42"
SOURCE = "/orders-service"

#: The user's module: its own route, and the inbox mounted under /shipping with a token.
APP_MODULE = """
import asyncio
import os
import sqlite3

from fastapi import FastAPI

from ackledger import Inbox

DB = os.environ["SHIP_DB"]


async def ship(tx, event):
    await asyncio.sleep(0)
    row = (event["id"], event["data"]["total"])
    tx.execute("INSERT INTO shipments (id, total) VALUES (?, ?)", row)


with sqlite3.connect(DB) as setup:
    setup.execute("CREATE TABLE IF NOT EXISTS shipments (id TEXT PRIMARY KEY, total INTEGER)")
inbox = Inbox(DB, handlers={"com.example.order.placed": ship})
app = FastAPI()
app.mount(
    "/shipping",
    inbox.asgi(token=os.environ["SHIP_TOKEN"], allowed_hosts=["shipping.internal"]),
)


@app.get("/ping")
async def ping() -> dict:
    return {"pong": True}
"""


class App:
    def __init__(self, port: int, db: Path) -> None:
        self.port = port
        self.db = db
        self.url = f"http://127.0.0.1:{port}/shipping/events"

    def request(
        self, method: str, path: str, body: object = None, **headers: str
    ) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            sent = {"Content-Type": "application/cloudevents+json"}
            sent.update({name.replace("_", "-"): value for name, value in headers.items()})
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, data, sent)
            answer = conn.getresponse()
            found = {name.lower(): value for name, value in answer.getheaders()}
            raw = answer.read()
            return answer.status, found, json.loads(raw) if "json" in found["content-type"] else raw
        finally:
            conn.close()


def _healthy(app: App) -> bool:
    try:
        return app.request("GET", "/shipping/healthz")[0] == 200
    except OSError:
        return False


@contextmanager
def serving(folder: Path) -> Iterator[App]:
    """The user's app under uvicorn on a free loopback port."""
    db = folder / "shipping.db"
    env = {"SHIP_DB": str(db), "SHIP_TOKEN": TOKEN}
    with uvicorn_serving(folder, APP_MODULE, env, lambda port: _healthy(App(port, db))) as port:
        yield App(port, db)
    assert TOKEN not in (folder / "uvicorn.log").read_text()


def placed(order_id: str, total: int = 10) -> dict[str, Any]:
    return new_event(SHIPPED, {"total": total}, source=SOURCE, id=order_id)


def shipments(db: Path) -> list[tuple[object, ...]]:
    return raw_rows(db, "SELECT id, total FROM shipments ORDER BY id")


def receipts(db: Path) -> dict[str, int]:
    rows = raw_rows(db, "SELECT id, receipts FROM ackledger_inbox")
    return {str(event_id): int(str(count)) for event_id, count in rows}


def unsent(outbox: Outbox) -> int:
    return outbox.pending_listing(1)[1]


BEARER = f"Bearer {TOKEN}"


def test_the_mounted_routes_have_the_front_door_and_the_host_app_its_own(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as app:
        event = placed("o-1")
        # No token, a wrong one, another scheme: 401, nothing applied.
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {TOKEN}"}):
            status, answer, problem = app.request("POST", "/shipping/events", event, **headers)
            assert status == 401, problem
            assert answer["www-authenticate"].startswith("Bearer")
            assert TOKEN not in json.dumps(problem)
        # A Host that is neither loopback nor allowed: 421 even with the token.
        status, _, problem = app.request(
            "POST", "/shipping/events", event, Host="evil.example", Authorization=BEARER
        )
        assert (status, problem["status"]) == (421, 421)
        assert shipments(app.db) == [] and receipts(app.db) == {}
        # The name allowed explicitly, with any port, and the token: applied.
        status, _, ack = app.request(
            "POST", "/shipping/events", event, Host="shipping.internal:8000", Authorization=BEARER
        )
        assert (status, ack["status"]) == (200, "applied")
        # The probes stay open below the mount; /metrics does not.
        assert app.request("GET", "/shipping/readyz")[0] == 200
        assert app.request("GET", "/shipping/metrics")[0] == 401
        assert app.request("GET", "/shipping/metrics", Authorization=BEARER)[0] == 200
        # The host app's own route is not the inbox's: no token, any Host.
        assert app.request("GET", "/ping", Host="www.example.org")[:1] == (200,)
        assert shipments(app.db) == [("o-1", 10)]


def test_every_http_sender_reaches_the_mounted_inbox_and_each_event_is_applied_once(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    orders = tmp_path / "orders.db"
    with serving(tmp_path) as app:
        assert send_http(placed("s-1"), app.url, token=TOKEN) is True
        assert send_http(placed("s-1"), app.url, token=TOKEN) is True  # a re-send: not re-applied
        batch = [placed("s-2"), placed("s-1"), placed("s-3")]
        assert send_http_batch(batch, app.url + "/batch", token=TOKEN) == 3

        with Outbox(orders, source=SOURCE) as outbox:
            for number in range(1, 31):
                outbox.publish(placed(f"r-{number}", number))
            done = run_cli(
                "dispatch", "--source", str(orders), "--to", app.url,
                "--token-file", str(token_file), "--limit", "5",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert unsent(outbox) == 25
            for flags in ([], ["--batch", "--limit", "4"]):
                relay = start_relay(
                    orders, app.url, tmp_path / "relay.log", "--token-file", str(token_file),
                    *flags,
                )  # fmt: skip
                try:
                    if not flags:  # the second round's events arrive while the relay runs
                        wait_until(lambda: unsent(outbox) == 0, "the relay to drain")
                        for number in range(31, 41):
                            outbox.publish(placed(f"r-{number}", number))
                    wait_until(lambda: unsent(outbox) == 0, "the relay to drain")
                finally:
                    assert relay.stop() == 0, (tmp_path / "relay.log").read_text()

        trace = run_cli(
            "trace", "r-7", "--source", str(orders), "--sink", app.url,
            "--token-file", str(token_file),
        )  # fmt: skip
        assert trace.returncode == 0, trace.stderr
        assert "r-7" in trace.stdout
        status = run_cli(
            "status", "--source", str(orders), "--sink", app.url,
            "--token-file", str(token_file), "--json",
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["sink"]["applied"] == 43

    expected = [f"r-{n}" for n in range(1, 41)] + ["s-1", "s-2", "s-3"]
    assert sorted(receipts(app.db)) == sorted(expected)
    assert receipts(app.db)["s-1"] == 3  # the first receipt and two re-sends: one effect
    assert [row[0] for row in shipments(app.db)] == sorted(expected)
    assert all(count == 1 for name, count in receipts(app.db).items() if name != "s-1")


def test_the_mount_refuses_a_bad_token_or_host_list_before_serving(tmp_path: Path) -> None:
    with Inbox(tmp_path / "shipping.db") as inbox:
        with pytest.raises(ValueError, match="token: holds characters"):
            inbox.asgi(token="two words")
        with pytest.raises(ValueError, match="token: is empty"):
            inbox.asgi(token="")
        with pytest.raises(TypeError, match="allowed_hosts: must be a list"):
            inbox.asgi(allowed_hosts="shipping.internal")
        with pytest.raises(ValueError, match="not a host name"):
            inbox.asgi(allowed_hosts=["shipping.internal/events"])
