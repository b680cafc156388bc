"""``LedgerClient`` and ``AsyncLedgerClient`` against a real ``serve ledger`` process and against
scripted raw servers: the ``deliver --run`` protocol (claim, complete, release) from Python,
the same answers from both clients, and bad input refused before anything is sent."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

import ackledger
from ackledger import AsyncLedgerClient, InFlight, LedgerClient, NotAcknowledged
from ackledger.ledger.http_message import AnswerReader
from ackledger.ledger.outcomes import InFlight as ClaimInFlight
from ackledger.ledger.outcomes import UnknownDelivery
from ackledger.ops.processes import Service
from tests.conftest import raw_rows
from tests.rawserver import RawServer, forbid_network, http_answer

pytestmark = pytest.mark.slow

Client = LedgerClient | AsyncLedgerClient


def _call(client: Client, method: str, *args: Any, **kwargs: Any) -> Any:
    """The same method of either client, its answer (a coroutine run to its end)."""
    found = getattr(client, method)(*args, **kwargs)
    if isinstance(client, AsyncLedgerClient):
        return asyncio.run(found)
    return found


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> type[Client]:
    return LedgerClient if request.param == "sync" else AsyncLedgerClient


def test_claim_then_complete_runs_the_work_once(
    ledger_service: Service, ledger_db: Path, kind: type[Client]
) -> None:
    first = kind(ledger_service.base_url, pod_uid="pod-a")
    second = kind(ledger_service.base_url + "/deliveries", pod_uid="pod-b")
    taken = _call(first, "claim", "case", "job-1")
    assert taken["state"] == "in_progress" and taken["duplicate"] is False
    token = taken["claim"]["token"]
    assert len(token) == 32 and taken["claim"]["taken_over"] is False

    with pytest.raises(InFlight) as raised:
        _call(second, "claim", "case", "job-1", claim_ttl=60)
    refused = raised.value
    # ``ackledger.InFlight`` is the base; a ledger claim's says who holds it.
    assert isinstance(refused, ClaimInFlight)
    assert refused.claimed_by == "pod-a"
    assert 0 < refused.retry_after <= 60
    assert isinstance(refused, ackledger.Conflict)

    done = _call(first, "complete", "case", "job-1", result={"rows": 3}, claim=token)
    assert (done["state"], done["result"], done["duplicate"]) == ("completed", {"rows": 3}, False)
    assert done["completed_by"] == "pod-a"

    again = _call(second, "claim", "case", "job-1")
    assert again["state"] == "completed" and "claim" not in again
    assert again["result"] == {"rows": 3} and again["delivery_no"] == taken["delivery_no"]
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_deliveries") == [(1,)]
    pods = [
        row[0]
        for row in raw_rows(ledger_db, "SELECT pod_uid FROM ackledger_attempts ORDER BY rowid")
    ]
    assert pods == ["pod-a", "pod-b", "pod-b"]


def test_a_released_claim_is_taken_at_once_by_the_next_execution(
    ledger_service: Service, kind: type[Client]
) -> None:
    client = kind(ledger_service.base_url, pod_uid="pod-a")
    token = _call(client, "claim", "case", "job-2")["claim"]["token"]
    released = _call(client, "release", "case", "job-2", claim=token, exit_status=3)
    assert released["state"] == "in_progress" and released["released"] is True
    # The same key right away, by another execution: no wait for the claim's ttl.
    retry = _call(client, "claim", "case", "job-2", pod_uid="pod-b")
    assert retry["state"] == "in_progress" and retry["claim"]["token"] != token
    done = _call(client, "complete", "case", "job-2", claim=retry["claim"]["token"])
    assert done["state"] == "completed"
    with pytest.raises(UnknownDelivery):
        _call(client, "release", "case", "never-asked", claim=token)


def test_both_clients_read_the_same_ledger(ledger_service: Service) -> None:
    sync = LedgerClient(ledger_service.base_url, pod_uid="reader")
    sync.request("scope", "w1", payload={"qty": 1})
    asynchronous = AsyncLedgerClient(ledger_service.base_url, pod_uid="reader")

    async def read_all() -> list[Any]:
        return list(
            await asyncio.gather(
                asynchronous.deliveries("scope"),
                asynchronous.attempts("scope"),
                asynchronous.deliveries(),
                asynchronous.request("scope", "w1", payload={"qty": 1}),
            )
        )

    deliveries, attempts, every, repeat = asyncio.run(read_all())
    assert deliveries == every and len(deliveries) == 1
    assert [a["pod_uid"] for a in attempts] == ["reader"]
    assert repeat["duplicate"] is True
    assert sync.attempts("scope") == asyncio.run(asynchronous.attempts("scope"))
    assert sync.health() == asyncio.run(asynchronous.health())
    with pytest.raises(ackledger.Conflict, match="another payload"):
        asyncio.run(asynchronous.request("scope", "w1", payload={"qty": 2}))


BAD_INPUT: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    ("claim", ("bad case", "w"), {}, ValueError, "case_id"),
    ("claim", ("c", "w"), {"claim_ttl": -1}, ValueError, "claim_ttl"),
    ("claim", ("c", "w"), {"claim_ttl": None}, TypeError, "claim_ttl"),
    ("claim", ("c", "w"), {"pod_uid": ""}, ValueError, "pod_uid"),
    ("complete", ("c", "w"), {"claim": "not-a-token"}, ValueError, "claim"),
    ("complete", ("c", "w"), {"result": {1, 2}}, ValueError, "result"),
    ("release", ("c", "w"), {"claim": None}, TypeError, "claim"),
    ("release", ("c", "w"), {"claim": "0" * 32, "exit_status": 999}, ValueError, "exit_status"),
    ("request", ("c", "w"), {"mode": "sometimes"}, ValueError, "mode"),
    ("deliveries", ("c/d",), {}, ValueError, "case_id"),
]


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_refused_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
    kind: type[Client],
    case: tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str],
) -> None:
    method, args, kwargs, error, named = case
    client = kind("http://127.0.0.1:9", pod_uid="p")
    touched = forbid_network(monkeypatch)
    with pytest.raises(error, match=named):
        _call(client, method, *args, **kwargs)
    assert touched == []


def test_an_unsafe_url_or_token_is_refused_when_the_client_is_made(kind: type[Client]) -> None:
    with pytest.raises(ackledger.UnsafeTarget):
        kind("http://ledger.example:8080")
    with pytest.raises(ackledger.UnsafeTarget):
        kind("http://127.0.0.1:1/events")
    with pytest.raises(ValueError, match="token"):
        kind("http://127.0.0.1:1", token="")
    assert kind("http://ledger.example:8080", allowed_hosts=["ledger.example"]).url


# -- one reading of answers, whichever transport carries them --------------------------------


def _answered(raw: bytes, *, close: bool = False) -> RawServer:
    return RawServer(lambda body: raw, close_after_answer=close)


def _chunked(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEALTH = json.dumps({"pod_uid": "x", "boot_id": "y"}).encode()


@pytest.mark.parametrize(
    ("raw", "close"),
    [
        (http_answer(200, HEALTH), False),
        (_chunked(HEALTH), False),
        (b"HTTP/1.0 200 OK\r\n\r\n" + HEALTH, True),  # framed by the end of the connection
    ],
)
def test_every_framing_reads_the_same(kind: type[Client], raw: bytes, close: bool) -> None:
    with _answered(raw, close=close) as server:
        client = kind(f"http://127.0.0.1:{server.port}", pod_uid="p")
        assert _call(client, "health") == {"pod_uid": "x", "boot_id": "y"}
        head = server.heads[0]
    assert head.startswith(b"GET /healthz HTTP/1.1\r\n")
    assert b"\r\nConnection: close" in head


@pytest.mark.parametrize(
    ("raw", "close", "error", "text"),
    [
        (http_answer(200, b"[]" + b" " * (65 * 1024)), False, NotAcknowledged, "over"),
        (http_answer(200, b"not json"), False, NotAcknowledged, "not valid JSON"),
        (http_answer(200, b'{"x": 1}'), False, NotAcknowledged, "no delivery_no"),
        (http_answer(503, b'{"detail": "later"}'), False, NotAcknowledged, "HTTP 503"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}", True, ConnectionResetError, "closed"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}!!", True, NotAcknowledged, "longer"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", True, NotAcknowledged, "status line"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", True, NotAcknowledged, "header line"),
        (b"", True, ConnectionResetError, "without an answer"),
    ],
)
def test_every_bad_answer_fails_the_same(
    kind: type[Client], raw: bytes, close: bool, error: type[Exception], text: str
) -> None:
    with _answered(raw, close=close) as server:
        client = kind(f"http://127.0.0.1:{server.port}", pod_uid="p")
        with pytest.raises(error, match=text):
            _call(client, "request", "c", "w")


def test_a_ledger_that_does_not_answer_in_time_raises_timeout(kind: type[Client]) -> None:
    def never(body: bytes) -> bytes:
        time.sleep(1.0)
        return http_answer(200, b"{}")

    with RawServer(never) as server:
        client = kind(f"http://127.0.0.1:{server.port}", pod_uid="p", timeout=0.2)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _call(client, "health")
        assert time.monotonic() - started < 0.9


def test_the_async_client_leaves_the_event_loop_free_while_the_ledger_answers() -> None:
    def slow(body: bytes) -> bytes:
        time.sleep(0.5)
        return http_answer(200, HEALTH)

    async def both(client: AsyncLedgerClient) -> tuple[Any, int]:
        ticks = 0

        async def ticker(answer: Awaitable[Any]) -> Any:
            nonlocal ticks
            task = asyncio.ensure_future(answer)
            while not task.done():
                ticks += 1
                await asyncio.sleep(0.01)
            return task.result()

        return await ticker(client.health()), ticks

    with RawServer(slow) as server:
        client = AsyncLedgerClient(f"http://127.0.0.1:{server.port}", pod_uid="p")
        answer, ticks = asyncio.run(both(client))
    assert answer["boot_id"] == "y"
    assert ticks >= 20  # 0.5 s of 10 ms ticks, give or take a loaded machine


def test_a_bearer_token_is_sent(kind: type[Client]) -> None:
    with _answered(http_answer(200, HEALTH)) as server:
        client = kind(f"http://127.0.0.1:{server.port}", pod_uid="p", token="s3cret-token-1")
        _call(client, "health")
        assert b"\r\nAuthorization: Bearer s3cret-token-1" in server.heads[0]
    assert "s3cret" not in repr(vars(client))


def test_the_documented_examples_run(ledger_service: Service) -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "ledger.md").read_text()
    blocks = [
        block
        for block in re.findall(r"```python\n(.*?)```", docs, flags=re.S)
        if "LedgerClient" in block
    ]
    assert any("AsyncLedgerClient" in block for block in blocks)
    assert any("client.claim(" in block for block in blocks)
    for block in blocks:
        assert "http://127.0.0.1:8080" in block
        code = block.replace("http://127.0.0.1:8080", ledger_service.base_url)
        exec(compile(code, "docs/ledger.md", "exec"), {"__name__": "docs"})  # noqa: S102


# -- the answer reader alone: bytes in, (status, body) out -----------------------------------


def _read(raw: bytes, cap: int, step: int) -> tuple[int, bytes]:
    reader = AnswerReader(cap)
    for at in range(0, len(raw), step):
        if reader.feed(raw[at : at + step]):
            assert at + step >= len(raw)  # complete only once the last byte is in
            break
    return reader.answer()


@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_the_reader_gives_the_same_answer_however_the_bytes_arrive(step: int) -> None:
    assert _read(http_answer(200, HEALTH), 1000, step) == (200, HEALTH)
    assert _read(_chunked(HEALTH), 1000, step) == (200, HEALTH)
    assert _read(b"HTTP/1.1 204 No Content\r\n\r\n", 1000, step) == (204, b"")
    trailer = _chunked(HEALTH)[: -len(b"\r\n")] + b"X-Sum: 1\r\n\r\n"
    assert _read(trailer, 1000, step) == (200, HEALTH)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (http_answer(200, b"x" * 101), "over 100 bytes"),
        (_chunked(b"x" * 101), "over 100 bytes"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 20000, "head over"),
        (b"HTTP/1.1 100 Continue\r\n\r\n", "interim"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "conflicting"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", "CRLF"),
    ],
)
def test_the_reader_refuses_what_it_must(raw: bytes, text: str) -> None:
    with pytest.raises(NotAcknowledged, match=text):
        _read(raw, 100, len(raw))
