"""``IdempotencyMiddleware`` around a small Starlette shop (tests/idempotency_app.py), in
process, on SQLite and PostgreSQL: the first request runs, repeats replay, misuse is a problem
JSON that stores nothing, errors release the key, unstorable answers are never re-run, and an
endpoint may complete the key in its own transaction. The app's effects and the keys are read
back through the test's own connection."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import anyio.from_thread
import httpx
import pytest

from ackledger.ledger.idempotency_middleware import MAX_BYTES, PROBLEM_TYPE_BASE

from ..idempotency_app import EFFECTS, build
from .conftest import Target


class AppClient:
    """Requests to an ASGI app on an event loop thread of the client's own (any test thread
    may ask); an app's exception reaches the test as the 500 its server would send."""

    def __init__(self, app: Any) -> None:
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        self._stack.callback(self._portal.call, self._client.aclose)

    def __enter__(self) -> AppClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def request(
        self, method: str, path: str, content: bytes = b"", headers: Any = None
    ) -> httpx.Response:
        ask = functools.partial(self._client.request, method, path, headers=headers)
        return self._portal.call(functools.partial(ask, content=content))

    def post(self, path: str, content: bytes = b"", headers: Any = None) -> httpx.Response:
        return self.request("POST", path, content, headers)

    def get(self, path: str, headers: Any = None) -> httpx.Response:
        return self.request("GET", path, b"", headers)

    def put(self, path: str, content: bytes = b"", headers: Any = None) -> httpx.Response:
        return self.request("PUT", path, content, headers)

    def patch(self, path: str, content: bytes = b"", headers: Any = None) -> httpx.Response:
        return self.request("PATCH", path, content, headers)


@pytest.fixture
def client(target: Target) -> Iterator[AppClient]:
    target.execute(EFFECTS)
    app = build(target.ref, lease="3s", sleep=0.0)
    with AppClient(app) as opened:
        yield opened
    app.close()


def _effects(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT route, body FROM idem_effects ORDER BY route, body")


def _keys(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT key, state FROM ackledger_idempotency_keys ORDER BY key")


def _post(
    client: AppClient, path: str, key: str | None, body: bytes = b"{}", **headers: str
) -> httpx.Response:
    sent = dict(headers)
    if key is not None:
        sent["Idempotency-Key"] = key
    return client.post(path, body, sent)


def _is_problem(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    found: dict[str, Any] = answer.json()
    assert found["type"] == PROBLEM_TYPE_BASE + kind
    assert found["status"] == status
    return found


def test_the_first_request_runs_and_repeats_replay(client: AppClient, target: Target) -> None:
    first = _post(client, "/orders", '"o-1"', b'{"sku":"snack"}')
    assert first.status_code == 201
    assert first.json() == {"ordered": {"sku": "snack"}}
    assert "idempotent-replayed" not in first.headers
    # The bare token of the same characters is the same key.
    for key in ('"o-1"', "o-1"):
        again = _post(client, "/orders", key, b'{"sku":"snack"}')
        assert again.status_code == 201
        assert again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == "/orders/1"
        assert again.headers["etag"] == '"v1"'
        assert again.headers["content-type"] == "application/json"
        assert "x-not-kept" not in again.headers
    assert _effects(target) == [("orders", '{"sku":"snack"}')]
    assert _keys(target) == [("o-1", "completed")]


def test_another_request_with_the_key_is_422(client: AppClient, target: Target) -> None:
    assert _post(client, "/orders", "k", b'{"sku":"a"}').status_code == 201
    for answer in (
        _post(client, "/orders", "k", b'{"sku":"b"}'),  # another body
        _post(client, "/orders?x=1", "k", b'{"sku":"a"}'),  # another query
        client.patch("/orders", b'{"sku":"a"}', {"Idempotency-Key": "k"}),
        _post(client, "/orders", "k", b'{"sku":"a"}', **{"X-Tenant": "other"}),  # another caller
    ):
        _is_problem(answer, 422, "idempotency-key-reused")
    assert _effects(target) == [("orders", '{"sku":"a"}')]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        '""',
        "x" * 256,
        '"' + "x" * 256 + '"',
        "a b",
        '"abc',
        '"a"x',
        '"a\\b"',
        "a,b",
        "k\u00e9",
        '"a\tb"',
    ],
)
def test_a_bad_key_is_400_and_nothing_is_stored(
    client: AppClient, target: Target, bad: str
) -> None:
    answer = client.post("/orders", b"{}", [(b"idempotency-key", bad.encode("utf-8"))])
    detail = _is_problem(answer, 400, "idempotency-key-invalid")["detail"]
    assert "Idempotency-Key" in detail
    assert _effects(target) == [] and _keys(target) == []


def test_the_longest_key_and_escapes_are_read(client: AppClient, target: Target) -> None:
    assert _post(client, "/orders", "x" * 255).status_code == 201
    assert _post(client, "/orders", '"a\\"b\\\\c"').status_code == 201
    assert sorted(row[0] for row in _keys(target)) == ['a"b\\c', "x" * 255]


def test_two_key_headers_are_400(client: AppClient, target: Target) -> None:
    headers = [(b"idempotency-key", b"a"), (b"idempotency-key", b"b")]
    _is_problem(client.post("/orders", b"{}", headers), 400, "idempotency-key-invalid")
    assert _effects(target) == []


def test_methods_not_covered(client: AppClient, target: Target) -> None:
    # Without a key they pass through; with one the client learns it is not honoured.
    assert client.get("/read").json() == {"read": True}
    _is_problem(
        client.get("/read", headers={"Idempotency-Key": "k"}), 400, "idempotency-key-not-used"
    )
    answer = client.put("/orders", b"{}", {"Idempotency-Key": "k"})
    assert "only PATCH, POST" in _is_problem(answer, 400, "idempotency-key-not-used")["detail"]
    assert _effects(target) == [] and _keys(target) == []
    # Without a key a covered method runs as usual, and nothing is stored.
    assert _post(client, "/orders", None).status_code == 201
    assert _keys(target) == []


def test_a_required_key(target: Target) -> None:
    target.execute(EFFECTS)
    app = build(target.ref, required=True)
    with AppClient(app) as client:
        _is_problem(_post(client, "/orders", None), 400, "idempotency-key-missing")
        assert client.get("/read").status_code == 200
    app.close()
    assert _effects(target) == []


def test_a_body_over_the_cap_is_413(client: AppClient, target: Target) -> None:
    _is_problem(_post(client, "/orders", "k", b"x" * (MAX_BYTES + 1)), 413, "body-too-large")
    assert _effects(target) == [] and _keys(target) == []


@pytest.mark.parametrize("path", ["/unavailable", "/boom"])
def test_a_server_error_releases_the_key(client: AppClient, target: Target, path: str) -> None:
    assert _post(client, path, "k").status_code in (500, 503)
    assert _keys(target) == []
    assert _post(client, path, "k").status_code in (500, 503)
    assert len(_effects(target)) == 2


@pytest.mark.parametrize(
    ("path", "size"), [("/big", MAX_BYTES + 1), ("/stream", 3 * (MAX_BYTES // 2))]
)
def test_an_unstorable_answer_is_never_run_again(
    client: AppClient, target: Target, path: str, size: int
) -> None:
    first = _post(client, path, "k")
    assert first.status_code == 200 and len(first.content) == size
    again = _post(client, path, "k")
    detail = _is_problem(again, 409, "idempotency-answer-not-stored")["detail"]
    assert "not run again" in detail
    assert "retry-after" not in again.headers
    assert len(_effects(target)) == 1


def test_in_flight_is_409_with_retry_after(target: Target) -> None:
    target.execute(EFFECTS)
    app = build(target.ref, lease="3s", sleep=4.0)
    with AppClient(app) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(_post, client, "/orders", "k")
        deadline = time.monotonic() + 30
        while not _effects(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = _post(client, "/orders", "k")
        _is_problem(answer, 409, "idempotency-key-in-flight")
        assert 1 <= int(answer.headers["retry-after"]) <= 3
        # Past its first lease the running request still holds the key (renewed).
        time.sleep(3.2)
        _is_problem(_post(client, "/orders", "k"), 409, "idempotency-key-in-flight")
        assert first.result(30).status_code == 201
        assert _post(client, "/orders", "k").headers["idempotent-replayed"] == "true"
    app.close()
    assert len(_effects(target)) == 1


def test_the_endpoint_completes_the_key_in_its_own_transaction(
    client: AppClient, target: Target
) -> None:
    rolled_back = client.post("/in-tx?rollback=1", b"", {"Idempotency-Key": "k"})
    assert rolled_back.status_code == 500
    assert _effects(target) == [] and _keys(target) == []
    first = client.post("/in-tx", b"", {"Idempotency-Key": "k"})
    assert (first.status_code, first.json()) == (201, {"paid": True})
    again = client.post("/in-tx", b"", {"Idempotency-Key": "k"})
    assert (again.status_code, again.json()) == (201, {"paid": True})
    assert again.headers["idempotent-replayed"] == "true"
    assert _effects(target) == [("in_tx", "paid")]


def test_what_the_endpoint_answers_beside_its_own_completion_is_kept_only_if_committed(
    client: AppClient, target: Target
) -> None:
    # Its transaction rolled back and it refused the request: the refusal is the key's answer.
    refused = client.post("/in-tx?rollback=refuse", b"", {"Idempotency-Key": "r"})
    assert (refused.status_code, refused.json()) == (422, {"error": "refused"})
    again = client.post("/in-tx?rollback=refuse", b"", {"Idempotency-Key": "r"})
    assert (again.status_code, again.json()) == (422, {"error": "refused"})
    assert again.headers["idempotent-replayed"] == "true"
    # Its completion committed: what it stored stands, whatever it answered after.
    other = client.post("/in-tx?answer=other", b"", {"Idempotency-Key": "o"})
    assert (other.status_code, other.json()) == (200, {"paid": "otherwise"})
    again = client.post("/in-tx?answer=other", b"", {"Idempotency-Key": "o"})
    assert (again.status_code, again.json()) == (201, {"paid": True})
    assert _effects(target) == [("in_tx", "paid")]
    assert _keys(target) == [("o", "completed"), ("r", "completed")]


def test_on_postgresql_every_write_of_a_first_request_waits_for_its_commit(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL can lose an asynchronous commit while its client runs on, so there the claim
    and the completion are both durable: no transaction of the middleware turns
    ``synchronous_commit`` off (SQLite's claim does skip its fsync:
    tests/test_idempotent_syncs.py)."""
    if target.dialect != "postgres":
        pytest.skip("SQLite's fsyncs are counted under strace")
    import psycopg

    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def seen(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    target.execute(EFFECTS)
    app = build(target.ref, lease="3s", sleep=0.0)
    monkeypatch.setattr(psycopg.Cursor, "execute", seen)
    with AppClient(app) as client:
        for key in ("a", "b"):
            assert client.post("/orders", b"{}", {"Idempotency-Key": key}).status_code == 201
        assert client.post("/in-tx", b"", {"Idempotency-Key": "c"}).status_code == 201
    app.close()
    assert sum("INSERT INTO ackledger_idempotency_keys" in sql for sql in sent) == 3
    assert not [sql for sql in sent if "synchronous_commit" in sql]


def test_keys_expire_after_ttl(client: AppClient, target: Target) -> None:
    assert _post(client, "/orders", "k").status_code == 201
    target.execute("UPDATE ackledger_idempotency_keys SET expires_at = expires_at - 86400")
    again = _post(client, "/orders", "k")
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert len(_effects(target)) == 2


def test_concurrent_requests_in_one_process_run_once(client: AppClient, target: Target) -> None:
    barrier = threading.Barrier(8)

    def one(_: int) -> int:
        barrier.wait()
        answer = _post(client, "/orders", "same")
        return answer.status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(8)))
    assert set(statuses) <= {201, 409} and 201 in statuses
    assert len(_effects(target)) == 1
