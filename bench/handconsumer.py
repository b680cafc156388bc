"""The hand-written consumer ``consume --session`` is compared with: pika, SQLAlchemy, the same
guarantees. One message at a time: in one transaction a unique receipt insert (a duplicate
skips the effect) and the effect, then the ack after the commit.

    python -m bench.handconsumer AMQP_URL QUEUE PREFETCH COUNT   (BENCH_SHOP_DB set)

It exits after COUNT messages.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pika
from sqlalchemy import text

from .usershop import Session, ship

RECEIPTS = (
    "CREATE TABLE hand_receipts (source TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (source, id))"
)
CLAIM = text("INSERT INTO hand_receipts (source, id) VALUES (:source, :id) ON CONFLICT DO NOTHING")


def main(argv: list[str]) -> int:
    url, queue, prefetch, count = argv[0], argv[1], int(argv[2]), int(argv[3])
    assert Session is not None, "BENCH_SHOP_DB is not set"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    seen = 0

    def on_message(channel: Any, method: Any, properties: Any, body: bytes) -> None:
        nonlocal seen
        event = json.loads(body)
        with Session() as session, session.begin():
            claimed = session.execute(CLAIM, {"source": event["source"], "id": event["id"]})
            if claimed.rowcount == 1:  # type: ignore[attr-defined]
                ship(session, event)
        channel.basic_ack(method.delivery_tag)
        seen += 1
        if seen >= count:
            channel.stop_consuming()

    channel.basic_consume(queue, on_message)
    channel.start_consuming()
    connection.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
