"""NATS JetStream for the broker benchmark: a fresh stream per run, and the raw floors.

The floor is nats-py with no ackledger code: a JetStream publish with a ``Nats-Msg-Id`` header,
waiting for its PubAck one at a time, or W publishes in flight and then all W PubAcks. The
stream is file-backed, as a durable one must be.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

URL = "nats://127.0.0.1:4222"
T = TypeVar("T")


@dataclass(frozen=True)
class Stream:
    name: str
    prefix: str

    def url(self) -> str:
        """Our relay's target URL: every event to ``PREFIX.<type>``, acked by this stream."""
        return f"{URL}?subject={self.prefix}&stream={self.name}"


def _run(work: Callable[[Any], Awaitable[T]]) -> T:
    import nats

    async def session() -> T:
        nc = await nats.connect(URL, connect_timeout=5, max_reconnect_attempts=0)
        try:
            return await work(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(session())


def available() -> str | None:
    async def probe(js: Any) -> None:
        await js.account_info()

    try:
        _run(probe)
    except Exception as exc:
        return f"NATS JetStream not reachable at {URL}: {type(exc).__name__}"
    return None


@contextmanager
def stream(tag: str) -> Iterator[Stream]:
    """A new file-backed stream taking ``PREFIX.>``; deleted afterwards."""
    from nats.js.api import StorageType, StreamConfig

    suffix = secrets.token_hex(4)
    made = Stream(f"ackledger-bench-{tag}-{suffix}", f"bench{tag}{suffix}")

    async def create(js: Any) -> None:
        config = StreamConfig(
            name=made.name, subjects=[made.prefix + ".>"], storage=StorageType.FILE
        )
        await js.add_stream(config)

    async def delete(js: Any) -> None:
        await js.delete_stream(made.name)

    _run(create)
    try:
        yield made
    finally:
        _run(delete)


def messages(where: Stream) -> int:
    async def count(js: Any) -> int:
        info = await js.stream_info(where.name)
        return int(info.state.messages)

    return _run(count)


def floor_rate(body: bytes, total: int, window: int) -> float:
    """Messages/s of raw JetStream publishes, ``window`` PubAcks awaited together."""
    with stream(f"floor{window}") as where:
        subject = f"{where.prefix}.floor"

        async def publish(js: Any) -> float:
            async def one(n: int) -> None:
                ack = await js.publish(subject, body, headers={"Nats-Msg-Id": f"floor {n}"})
                if ack.stream != where.name or ack.duplicate:
                    raise RuntimeError(f"NATS floor: unexpected PubAck {ack}")

            start = time.perf_counter()
            for first in range(0, total, window):
                await asyncio.gather(*(one(n) for n in range(first, min(total, first + window))))
            return total / (time.perf_counter() - start)

        return _run(publish)
