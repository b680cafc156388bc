"""The peer, run in its own venv: faststream-outbox relaying a PostgreSQL outbox to RabbitMQ.

``python peer_child.py CONFIG_JSON`` (with ``.venv-peer``'s interpreter, never ours): makes the
peer's own table with ``make_outbox_table``, fills it through ``OutboxBroker.publish_batch`` in
chunks, prints ``ready`` and then relays with the settings given, until SIGTERM. The parent
times it from another connection (rows deleted), so nothing here is on the clock.

The relay is the peer's documented shape: a RabbitMQ publisher stacked on an outbox subscriber
whose handler returns the body. Its settings are passed through as given (``max_workers``,
``fetch_batch_size``, ``terminal_flush_batch_size``, ``persist``); nothing else is tuned.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

from faststream.rabbit import (  # type: ignore[import-not-found,unused-ignore]
    ExchangeType,
    RabbitBroker,
    RabbitExchange,
)
from faststream_outbox import (  # type: ignore[import-not-found,unused-ignore]
    OutboxBroker,
    make_outbox_table,
)
from sqlalchemy import MetaData  # type: ignore[import-not-found,unused-ignore]
from sqlalchemy.ext.asyncio import (  # type: ignore[import-not-found,unused-ignore]
    create_async_engine,
)

CHUNK = 1_000


async def main(config: dict[str, Any]) -> None:
    metadata = MetaData()
    table = make_outbox_table(metadata, table_name=config["table"])
    engine = create_async_engine(config["db"])
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    outbox = OutboxBroker(engine, outbox_table=table)
    rabbit = RabbitBroker(config["amqp"])
    exchange = RabbitExchange(config["exchange"], type=ExchangeType.DIRECT, durable=True)
    publisher = rabbit.publisher(
        exchange=exchange, routing_key=config["routing_key"], persist=config["persist"]
    )

    @publisher  # type: ignore[untyped-decorator,misc,unused-ignore]
    @outbox.subscriber(  # type: ignore[untyped-decorator,misc,unused-ignore]
        config["queue"],
        max_workers=config["workers"],
        fetch_batch_size=config["fetch"],
        terminal_flush_batch_size=config["flush"],
    )
    async def relay(body: dict[str, Any]) -> dict[str, Any]:
        return body

    template: dict[str, Any] = config["event"]
    total: int = config["events"]
    async with engine.begin() as conn:
        for start in range(0, total, CHUNK):
            bodies = [
                {**template, "id": f"{config['table']}-{n:07d}"}
                for n in range(start, min(total, start + CHUNK))
            ]
            await outbox.publish_batch(*bodies, queue=config["queue"], session=conn)
    # The parent waits for this file; the peer's own logs go wherever its stdout goes.
    with open(config["ready"], "w", encoding="ascii") as ready:
        ready.write("ready\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await rabbit.start()
    await outbox.start()
    await stop.wait()
    await outbox.stop()
    await rabbit.stop()
    await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
