"""Demo chapter: any event, applied by the user's own handler (CONTRACT v2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from ...ops.faultproxy import FaultProxy
from ...ops.processes import run_cli, start_service
from ...sink.inbox import Inbox
from ...source.outbox import Outbox
from .story import Story

#: The shipping service's handlers, as a user writes them in their own module.
HANDLERS_MODULE = """
from ackledger import Rejected


def ship(tx, event):
    data = event["data"]
    if not data["lines"]:
        raise Rejected("an order without lines cannot be shipped")
    tx.execute(
        "INSERT INTO shipments (order_id, customer, lines) VALUES (?, ?, ?)",
        (data["order"], data["customer"]["id"], len(data["lines"])),
    )


HANDLERS = {"com.example.order.placed": ship}
"""

PLACED: dict[str, Any] = {
    "type": "com.example.order.placed",
    "id": "order-1001",
    "partitionkey": "c-42",
    "data": {
        "order": "order-1001",
        "customer": {"id": "c-42", "name": "Aiko"},
        "lines": [{"sku": "tea", "qty": 2}, {"sku": "snack", "qty": 1}],
    },
}
EMPTY = {
    **PLACED,
    "id": "order-1002",
    "data": {**PLACED["data"], "order": "order-1002", "lines": []},
}


def _shipments(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT order_id, customer, lines FROM shipments").fetchall()
    finally:
        conn.close()


def any_event(story: Story, workdir: Path) -> None:
    orders, shipping = workdir / "orders.db", workdir / "shipping.db"
    story.chapter(
        "Any event, the user's own handler",
        """Beyond the lab: an order service publishes a CloudEvent of its own type with nested
        data; a shipping service applies it with its own handler, inside the inbox's
        transaction. The same seams hold: a lost answer means a re-send, and the re-send
        must not ship twice.""",
    )
    (workdir / "shipping_events.py").write_text(HANDLERS_MODULE, encoding="utf-8")
    conn = sqlite3.connect(shipping)
    conn.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY, customer TEXT, lines INTEGER)")
    conn.close()

    story.step("Publish order.placed (a CloudEvent on stdin) into the order service's outbox.")
    done = run_cli(
        "publish", "--source", str(orders), "--event-source", "/orders-service",
        stdin=json.dumps(PLACED),
    )  # fmt: skip
    listed = json.loads(run_cli("pending", "--source", str(orders), "--json").stdout)
    story.check(
        "the event is pending whole: its type, source and nested data as published",
        done.returncode == 0
        and len(listed) == 1
        and listed[0]["source"] == "/orders-service"
        and listed[0]["data"] == PLACED["data"],
        f"publish exit {done.returncode}, pending {[(e['id'], e['type']) for e in listed]}",
    )

    story.step("Start the shipping sink with its handlers (--handlers shipping_events:HANDLERS).")
    command = ["serve", "sink", "--db", str(shipping), "--port", "0"]
    command += ["--handlers", "shipping_events:HANDLERS"]
    with start_service(command, env={"PYTHONPATH": str(workdir)}) as service:
        with FaultProxy(service.port, drop_responses=1) as proxy:
            story.step("Dispatch through a proxy that drops the first answer.")
            lost = run_cli("dispatch", "--source", str(orders), "--to", proxy.url)
            shipped = _shipments(shipping)
            story.check(
                "the handler shipped it, yet the event stays pending (no ACK arrived)",
                lost.returncode == 1 and len(shipped) == 1 and _pending(orders) == ["order-1001"],
                f"exit {lost.returncode}, shipments {shipped}",
            )
            story.step("Dispatch again: the re-send meets its receipt.")
            again = run_cli("dispatch", "--source", str(orders), "--to", proxy.url)
        with Inbox(shipping) as inbox:
            receipt = inbox.receipt("order-1001", source="/orders-service") or {}
        story.check(
            "acknowledged as a duplicate and marked sent; shipped once",
            again.returncode == 0
            and receipt.get("receipts") == 2
            and _pending(orders) == []
            and _shipments(shipping) == [("order-1001", "c-42", 2)],
            f"exit {again.returncode}, receipts={receipt.get('receipts')}, "
            f"shipments {_shipments(shipping)}",
        )

        story.step("Publish an order without lines; the handler rejects it (permanent).")
        run_cli("publish", "--source", str(orders), stdin=json.dumps(EMPTY))
        refused = run_cli("dispatch", "--source", str(orders), "--to", service.base_url + "/events")
        with Inbox(shipping) as inbox:
            nothing = inbox.receipt("order-1002") is None
        story.check(
            "the sink answers 422 and records nothing; the event stays pending for an operator",
            refused.returncode == 1
            and "422" in refused.stderr
            and nothing
            and _pending(orders) == ["order-1002"],
            (refused.stderr.strip().splitlines() or ["(no output)"])[0],
        )


def _pending(orders: Path) -> list[str]:
    with Outbox(orders) as outbox:
        return [event["id"] for event in outbox.pending()]
