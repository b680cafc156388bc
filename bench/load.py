"""Concurrent keep-alive HTTP clients, for the sink's /events and the ledger's /deliveries.

An asyncio client on plain streams: each of N clients holds one keep-alive connection and sends
its next request as soon as the answer to the last one is read, until the time is up. It is
deliberately thin (a request line, two headers, a body; a status line, headers, a
Content-Length body) so that on a 2-core machine most of a core is left to the server.

Every answer is checked against what its route promises (``Route.check``): a rate is only a
rate of work done if every request got the answer it asked for, so a workload with any other
answer is refused by ``record`` instead of being reported as a number.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .common import Results, percentile

#: Makes request body ``n`` of client ``c``.
BodyMaker = Callable[[int, int], dict[str, Any]]

#: ``check(request body, status, content type, answer bytes)``: None when the answer is the one
#: the route promises for that request, else a few words saying what is wrong with it.
AnswerCheck = Callable[[dict[str, Any], int, str, bytes], str | None]


def _json_object(content_type: str, body: bytes) -> dict[str, Any] | str:
    if content_type.split(";", maxsplit=1)[0].strip().lower() != "application/json":
        return f"content type {content_type or 'missing'!r}"
    try:
        value = json.loads(body)
    except ValueError:
        return "not JSON"
    return value if isinstance(value, dict) else "not a JSON object"


def event_ack(sent: dict[str, Any], status: int, content_type: str, body: bytes) -> str | None:
    """``POST /events``: 200 and the ACK of this very event, applied or a duplicate."""
    if status != 200:
        return f"status {status}"
    answer = _json_object(content_type, body)
    if isinstance(answer, str):
        return answer
    if answer.get("ack") is not True:
        return "no ack"
    if answer.get("id") != sent["id"] or answer.get("source") != sent["source"]:
        return "ACK of another event"
    if answer.get("status") not in ("applied", "duplicate"):
        return f"ACK status {answer.get('status')!r}"
    return None


def delivery(sent: dict[str, Any], status: int, content_type: str, body: bytes) -> str | None:
    """``POST /deliveries`` in idempotent mode: 201 with a new delivery, or 200 with the
    delivery made before for the same key (``duplicate`` true), each naming the ledger."""
    if status not in (200, 201):
        return f"status {status}"
    answer = _json_object(content_type, body)
    if isinstance(answer, str):
        return answer
    number = answer.get("delivery_no")
    if not isinstance(number, int) or isinstance(number, bool):
        return "no delivery_no"
    if answer.get("duplicate") is not (status == 200):
        return f"status {status} with duplicate {answer.get('duplicate')!r}"
    if not isinstance(answer.get("attempt"), int) or not isinstance(answer.get("ledger"), dict):
        return "no attempt or ledger"
    return None


@dataclass(frozen=True)
class Route:
    """Where a workload posts, in which content type, and the answer each request must get."""

    path: str
    content_type: str
    check: AnswerCheck
    #: Header lines (each ending in CRLF) a request adds for its body, e.g. its own key.
    headers: Callable[[dict[str, Any]], str] | None = None


EVENTS = Route("/events", "application/cloudevents+json", event_ack)
DELIVERIES = Route("/deliveries", "application/json", delivery)


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    #: What was wrong with the answers that were not the expected ones, and how often.
    wrong: Counter[str] = field(default_factory=Counter)

    @property
    def all_expected(self) -> bool:
        return self.requests > 0 and not self.wrong

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else float("nan")

    def p(self, pct: float) -> float:
        """A latency percentile in milliseconds."""
        return 1000.0 * percentile(self.latencies, pct)


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, content_type = 0, ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"content-type":
            content_type = value.strip().decode("latin-1")
    body = await reader.readexactly(length) if length else b""
    return status, content_type, body


async def _client(
    url: str, route: Route, number: int, *, make: BodyMaker, deadline: float, result: LoadResult
) -> None:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    reader, writer = await asyncio.open_connection(host, parts.port)
    prefix = (
        f"POST {route.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: {route.content_type}\r\n"
    )
    sequence = 0
    try:
        while time.perf_counter() < deadline:
            sent = make(number, sequence)
            body = json.dumps(sent, separators=(",", ":")).encode()
            sequence += 1
            start = time.perf_counter()
            extra = route.headers(sent) if route.headers is not None else ""
            head = f"{prefix}{extra}Content-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            status, content_type, answer = await _read_answer(reader)
            result.latencies.append(time.perf_counter() - start)
            result.statuses[status] += 1
            result.requests += 1
            wrong = route.check(sent, status, content_type, answer)
            if wrong is not None:
                result.wrong[wrong] += 1
    finally:
        writer.close()
        await writer.wait_closed()


async def _run(url: str, route: Route, clients: int, seconds: float, make: BodyMaker) -> LoadResult:
    result = LoadResult(0, 0.0)
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(
            _client(url, route, number, make=make, deadline=deadline, result=result)
            for number in range(clients)
        )
    )
    result.seconds = time.perf_counter() - start
    return result


def run_load(url: str, route: Route, clients: int, seconds: float, make: BodyMaker) -> LoadResult:
    """``clients`` keep-alive connections to ``url`` posting ``make(c, n)`` to ``route`` for
    ``seconds``; every answer checked against the route's promise."""
    return asyncio.run(_run(url, route, clients, seconds, make))


def record(results: Results, key: str, label: str, load: LoadResult) -> None:
    """The rate and latencies of one repetition as ``key.rps``/``.p50``/``.p99``, or, when any
    request did not get the answer its route promises, those three figures refused with the
    status histogram and what was wrong (a refused figure stays refused for the whole run)."""
    parts = (("rps", label, "/s"), ("p50", f"{label}, p50", "ms"), ("p99", f"{label}, p99", "ms"))
    if not load.all_expected:
        statuses = ", ".join(f"{code}: {count:,}" for code, count in sorted(load.statuses.items()))
        wrong = ", ".join(f"{why}: {count:,}" for why, count in load.wrong.most_common())
        why = f"answers {{{statuses}}}; not as expected: {wrong or 'no answers'}"
        for part, words, unit in parts:
            results.refuse(f"{key}.{part}", words, unit, why)
        print(f"  {label}: REFUSED ({why})", flush=True)
        return
    values = {"rps": load.throughput, "p50": load.p(50), "p99": load.p(99)}
    for part, words, unit in parts:
        results.add(f"{key}.{part}", words, unit, values[part])
    print(
        f"  {label}: {load.throughput:,.0f}/s, p50 {load.p(50):.2f} ms, p99 {load.p(99):.2f} ms",
        flush=True,
    )
