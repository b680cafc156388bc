"""``ackledger serve sink --handlers MODULE:ATTR``: a real sink process applies a generic event
with the user's handler, and a handler name that is wrong stops it at start (exit 2)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ackledger import NotAcknowledged, new_event, send_http
from ackledger.ops.processes import run_cli, start_service

HANDLERS = """
from ackledger import Rejected


def ship(tx, event):
    if event["data"]["total"] <= 0:
        raise Rejected("nothing to ship")
    tx.execute("INSERT INTO shipments (order_id) VALUES (?)", (event["data"]["order"],))


HANDLERS = {"com.example.order.placed": ship}
"""


def placed(order_id: str, total: int) -> dict[str, object]:
    return new_event(
        "com.example.order.placed", {"order": order_id, "total": total}, source="/orders",
        id=order_id,
    )  # fmt: skip


def shipments(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT order_id FROM shipments ORDER BY order_id").fetchall()
    finally:
        conn.close()


def test_the_users_handler_applies_its_event_in_a_real_sink(tmp_path: Path) -> None:
    (tmp_path / "shop_events.py").write_text(HANDLERS, encoding="utf-8")
    db = tmp_path / "shipping.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY)")
    conn.close()
    command = ["serve", "sink", "--db", str(db), "--port", "0"]
    command += ["--handlers", "shop_events:HANDLERS"]
    with start_service(command, env={"PYTHONPATH": str(tmp_path)}) as sink:
        url = sink.base_url + "/events"
        assert send_http(placed("o-1", 10), url) is True
        assert send_http(placed("o-1", 10), url) is True  # the duplicate: shipped once
        try:
            send_http(placed("o-2", 0), url)
            raise AssertionError("a rejected event was acknowledged")
        except NotAcknowledged as refused:
            assert refused.status == 422
        # The reference handler is still there beside the user's.
        lab = new_event("warehouse.stock.added", {"sku": "tea", "qty": 2}, source="/wh", id="w-1")
        assert send_http(lab, url) is True
    assert shipments(db) == [("o-1",)]


def test_a_wrong_handlers_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "shop_events.py").write_text(HANDLERS, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    db = tmp_path / "never.db"
    for spec in ("shop_events:MISSING", "no_such_module:HANDLERS", "shop_events"):
        done = run_cli("serve", "sink", "--db", str(db), "--handlers", spec, env=env)
        assert done.returncode == 2, (spec, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--handlers" in lines[0] and "Traceback" not in done.stderr
    assert not db.exists()
