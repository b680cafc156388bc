"""``inbox.asgi()`` inside a user's own Starlette app, served by a real uvicorn process.

The app module is the user's: it builds its own ``Inbox(handlers=...)`` (the handlers live in
that process), has a route of its own, and mounts the sink's routes at ``/`` (where the
senders' ``/events`` path is) or under a prefix of its choosing. The test talks to it only
over loopback and reads the database on a connection of its own.
"""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ackledger import new_event, send_http, send_http_batch
from tests.conftest import raw_rows, stock_rows
from tests.events import SOURCE, lab
from tests.opshelp import uvicorn_serving

pytestmark = pytest.mark.slow

NOTE = "com.example.note.kept"

#: The user's module. ``MOUNT`` is where it mounts the sink's routes.
APP_MODULE = """
import os
import sqlite3

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from ackledger import Inbox

DB = os.environ["SHOP_DB"]


def keep_note(tx, event):
    tx.execute("INSERT INTO notes (id, text) VALUES (?, ?)", (event["id"], event["data"]["text"]))


inbox = Inbox(DB, handlers={"com.example.note.kept": keep_note})
with sqlite3.connect(DB) as setup:
    setup.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, text TEXT NOT NULL)")


async def stock(request: Request) -> JSONResponse:
    sku = request.path_params["sku"]
    return JSONResponse({"sku": sku, "qty": inbox.stock(sku), "served_by": "the shop"})


MOUNT = os.environ["SHOP_MOUNT"]
if MOUNT == "/":
    app = Starlette(routes=[Route("/shop/stock/{sku}", stock)])
    app.mount("/", inbox.asgi())
else:
    app = Starlette(routes=[Route("/shop/stock/{sku}", stock), Mount(MOUNT, app=inbox.asgi())])
"""


class Shop:
    """The user's app as a client sees it; ``prefix`` is where the sink's routes are."""

    def __init__(self, port: int, db: Path, prefix: str) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.port = port
        self.db = db
        self.prefix = prefix

    def get(self, path: str) -> tuple[int, Any]:
        with urllib.request.urlopen(self.base_url + path, timeout=10) as answer:  # noqa: S310
            return int(answer.status), json.loads(answer.read())

    def post(self, path: str, body: object, media: str) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": media})
            answer = conn.getresponse()
            headers = {name.lower(): value for name, value in answer.getheaders()}
            return answer.status, headers, json.loads(answer.read())
        finally:
            conn.close()


def _answers(shop: Shop) -> bool:
    try:
        return shop.get("/shop/stock/none")[0] == 200
    except OSError:
        return False


@contextmanager
def serving(folder: Path, mount: str) -> Iterator[Shop]:
    """The user's app under uvicorn on a free loopback port."""
    db = folder / "shop.db"
    prefix = "" if mount == "/" else mount
    env = {"SHOP_DB": str(db), "SHOP_MOUNT": mount}
    with uvicorn_serving(
        folder, APP_MODULE, env, lambda port: _answers(Shop(port, db, prefix))
    ) as port:
        yield Shop(port, db, prefix)


def state(db: Path) -> tuple[object, object, object]:
    return (
        raw_rows(db, "SELECT source, id, type, receipts FROM ackledger_inbox ORDER BY source, id"),
        raw_rows(db, "SELECT id, text FROM notes ORDER BY id"),
        stock_rows(db),
    )


@pytest.mark.parametrize("mount", ["/", "/sink"])
def test_the_users_own_route_and_the_sink_routes_share_one_app(tmp_path: Path, mount: str) -> None:
    with serving(tmp_path, mount) as shop:
        answers_of(shop)


def answers_of(shop: Shop) -> None:
    status, body = shop.get("/shop/stock/snack")
    assert (status, body) == (200, {"sku": "snack", "qty": 0, "served_by": "the shop"})
    prefix = shop.prefix
    assert shop.get(prefix + "/healthz")[0] == 200
    note = new_event(NOTE, {"text": "hello"}, source="/notes", id="n-1")
    status, headers, ack = shop.post(prefix + "/events", note, "application/cloudevents+json")
    assert (status, ack) == (
        200,
        {"ack": True, "id": "n-1", "source": "/notes", "status": "applied"},
    )
    status, headers, ack = shop.post(prefix + "/events", note, "application/cloudevents+json")
    assert ack["status"] == "duplicate" and headers["idempotent-replayed"] == "true"
    # The handler of the user's process ran in the inbox's transaction.
    assert state(shop.db) == ([("/notes", "n-1", NOTE, 2)], [("n-1", "hello")], [])
    status, headers, problem = shop.post(prefix + "/events", note, "application/json")
    # JSON without ce- headers is no CloudEvent: an unsupported media type.
    assert status == 415 and "content-type" in problem["detail"].lower()


def test_send_http_to_the_sink_mounted_at_root_is_acked_and_applied(tmp_path: Path) -> None:
    # The senders' path is exactly /events: a sink for them is mounted at "/".
    with serving(tmp_path, "/") as shop:
        sends_of(shop)


def sends_of(shop: Shop) -> None:
    url = shop.base_url + "/events"
    assert send_http(lab("snack-7", "snack", 7), url) is True
    assert send_http(lab("snack-7", "snack", 7), url) is True  # a re-send: ACKed, not re-applied
    note = new_event(NOTE, {"text": "hi"}, source="/notes", id="n-2")
    events = [lab("tea-1", "tea", 2), note, lab("tea-2", "tea", 3)]
    assert send_http_batch(events, shop.base_url + "/events/batch") == 3
    assert state(shop.db) == (
        [
            ("/notes", "n-2", NOTE, 1),
            (SOURCE, "snack-7", "warehouse.stock.added", 2),
            (SOURCE, "tea-1", "warehouse.stock.added", 1),
            (SOURCE, "tea-2", "warehouse.stock.added", 1),
        ],
        [("n-2", "hi")],
        [("snack", 7), ("tea", 5)],
    )
    # The user's route reads the same inbox.
    assert shop.get("/shop/stock/tea")[1]["qty"] == 5
