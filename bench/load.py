"""Concurrent keep-alive HTTP clients, for the sink's /events and the ledger's /deliveries.

An asyncio client on plain streams: each of N clients holds one keep-alive connection and sends
its next request as soon as the answer to the last one is read, until the time is up. It is
deliberately thin (a request line, two headers, a body; a status line, headers, a
Content-Length body) so that on a 2-core machine most of a core is left to the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .common import percentile

#: Makes request body ``n`` of client ``c``.
BodyMaker = Callable[[int, int], dict[str, Any]]


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else float("nan")

    def p(self, pct: float) -> float:
        """A latency percentile in milliseconds."""
        return 1000.0 * percentile(self.latencies, pct)


async def _read_answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return status


async def _client(
    url: str, path: str, number: int, *, make: BodyMaker, deadline: float, result: LoadResult
) -> None:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    reader, writer = await asyncio.open_connection(host, parts.port)
    content_type = "application/cloudevents+json"
    prefix = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: {content_type}\r\n"
    sequence = 0
    try:
        while time.perf_counter() < deadline:
            body = json.dumps(make(number, sequence), separators=(",", ":")).encode()
            sequence += 1
            start = time.perf_counter()
            writer.write(f"{prefix}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            status = await _read_answer(reader)
            result.latencies.append(time.perf_counter() - start)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.requests += 1
    finally:
        writer.close()
        await writer.wait_closed()


async def _run(url: str, path: str, clients: int, seconds: float, make: BodyMaker) -> LoadResult:
    result = LoadResult(0, 0.0)
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(
            _client(url, path, number, make=make, deadline=deadline, result=result)
            for number in range(clients)
        )
    )
    result.seconds = time.perf_counter() - start
    return result


def run_load(url: str, path: str, clients: int, seconds: float, make: BodyMaker) -> LoadResult:
    """``clients`` keep-alive connections to ``url`` posting ``make(c, n)`` for ``seconds``."""
    return asyncio.run(_run(url, path, clients, seconds, make))
