"""A sink process with a handler of its own: ``python -m tests.orders_sink DB``.

It serves ``Inbox(DB, handlers=HANDLERS).asgi()`` on a free loopback port and prints
"listening on URL" as ``ackledger serve sink`` does. Its handler applies a generic event type,
``com.example.order.placed``, whose ``data`` nests a list of lines: one ``order_lines`` row per
line, written inside the inbox's transaction.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Mapping
from typing import Any

from ackledger import Inbox
from ackledger.web.server import bind, serve

ORDER_PLACED = "com.example.order.placed"
SCHEMA = "CREATE TABLE IF NOT EXISTS order_lines (order_id TEXT, sku TEXT, qty INTEGER)"


def place_order(tx: Any, event: Mapping[str, Any]) -> None:
    for line in event["data"]["order"]["lines"]:
        tx.execute(
            "INSERT INTO order_lines (order_id, sku, qty) VALUES (?, ?, ?)",
            (event["id"], line["sku"], line["qty"]),
        )


HANDLERS = {ORDER_PLACED: place_order}


def main(db: str) -> None:
    with Inbox(db, handlers=HANDLERS) as inbox:
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(SCHEMA)
        conn.close()
        serve(inbox.asgi(), bind("127.0.0.1", 0), "orders sink")


if __name__ == "__main__":
    main(sys.argv[1])
