"""The sink's hot POST routes (plain ASGI, group commit) say exactly what the contract says.

A real ``ackledger serve sink`` process; answers are read with ``http.client`` so that status
lines, headers and bodies are seen as they travel.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ackledger import MAX_EVENT_BYTES
from ackledger._core.warm_threads import WarmThreads
from ackledger.envelope import canonical_json
from ackledger.ops.processes import Service
from ackledger.web.bodies import MAX_BATCH_BODY_BYTES
from ackledger.web.fastpath import WAIT_TURNS, GroupCommit

from .conftest import raw_rows
from .events import SOURCE, lab
from .inprocess import content_type

pytestmark = pytest.mark.slow


@pytest.fixture
def conn(sink_service: Service) -> Iterator[http.client.HTTPConnection]:
    connection = http.client.HTTPConnection("127.0.0.1", sink_service.port, timeout=30)
    yield connection
    connection.close()


def _call(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, path, body=body, headers={"Content-Type": content_type(path)})
    response = conn.getresponse()
    data = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def _post(conn: http.client.HTTPConnection, path: str, obj: Any) -> tuple[int, dict[str, str], Any]:
    status, headers, data = _call(conn, "POST", path, json.dumps(obj).encode())
    return status, headers, json.loads(data)


def test_applied_then_duplicate_with_replay_header(conn: http.client.HTTPConnection) -> None:
    event = lab("e1", "s1", 2)
    ack = {"ack": True, "id": "e1", "source": SOURCE}
    status, headers, body = _post(conn, "/events", event)
    assert (status, body) == (200, {**ack, "status": "applied"})
    assert headers["content-type"] == "application/json"
    assert "idempotent-replayed" not in headers
    status, headers, body = _post(conn, "/events", event)
    assert (status, body) == (200, {**ack, "status": "duplicate"})
    assert headers["idempotent-replayed"] == "true"


def test_conflict_is_422_problem_and_changes_nothing(
    conn: http.client.HTTPConnection, sink_db: Path
) -> None:
    assert _post(conn, "/events", lab("c1", "s1", 2))[0] == 200
    status, headers, body = _post(conn, "/events", lab("c1", "s1", 3))
    assert status == 422
    assert headers["content-type"] == "application/problem+json"
    assert body["status"] == 422
    assert body["type"].endswith("/conflict")
    assert raw_rows(sink_db, "SELECT qty FROM inventory WHERE sku = 's1'") == [(2,)]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"not json", "body"),
        (b"[1]", "body"),
        (json.dumps({**lab("x", "s", 1), "data": {"sku": "s"}}).encode(), "data.qty"),
        (json.dumps({**lab("x", "s", 1), "data": {"sku": "s", "qty": True}}).encode(), "data.qty"),
        (json.dumps({**lab("x", "s", 1), "id": "x\u2028"}).encode(), "id"),
        (b'{"id": "x", "sku": "s", "qty": 1}', "specversion"),
    ],
)
def test_invalid_is_400_naming_the_field(
    conn: http.client.HTTPConnection, sink_db: Path, raw: bytes, field: str
) -> None:
    status, headers, data = _call(conn, "POST", "/events", raw)
    assert status == 400
    assert headers["content-type"] == "application/problem+json"
    assert json.loads(data)["field"] == field
    assert raw_rows(sink_db, "SELECT count(*) FROM ackledger_inbox") == [(0,)]


@pytest.mark.parametrize(
    ("path", "cap"), [("/events", 64 * 1024), ("/events/batch", MAX_BATCH_BODY_BYTES)]
)
def test_body_over_its_cap_is_413(conn: http.client.HTTPConnection, path: str, cap: int) -> None:
    status, headers, data = _call(conn, "POST", path, b"[" + b" " * cap + b"]")
    assert status == 413
    assert headers["content-type"] == "application/problem+json"
    assert json.loads(data)["status"] == 413


def _padded(event_id: str, size: int) -> dict[str, Any]:
    """A lab event whose canonical JSON is exactly ``size`` bytes (padded by an extension)."""
    event = {**lab(event_id, "s", 1), "pad": ""}
    event["pad"] = "p" * (size - len(canonical_json(event)))
    assert len(canonical_json(event)) == size
    return event


@pytest.mark.parametrize("via", ["", "?via=asgi"], ids=["direct", "asgi"])
def test_a_batch_of_sixteen_events_of_64_kib_each_is_applied(
    conn: http.client.HTTPConnection, sink_db: Path, via: str
) -> None:
    """The batch's cap is 16 events of 64 KiB each, not 64 KiB for the whole list; an item
    over 64 KiB is still refused (400)."""
    events = [_padded(f"big-{via and 'a'}{i}", MAX_EVENT_BYTES) for i in range(16)]
    body = json.dumps(events, indent=1).encode()  # a client's own layout, not canonical
    assert len(body) > 16 * MAX_EVENT_BYTES
    status, _, data = _call(conn, "POST", "/events/batch" + via, body)
    assert status == 200, data[:300]
    assert [ack["status"] for ack in json.loads(data)["acks"]] == ["applied"] * 16
    over = [_padded(f"over-{i}", MAX_EVENT_BYTES - 1) for i in range(2)]
    over[1]["pad"] += "pp"
    status, _, data = _call(conn, "POST", "/events/batch" + via, json.dumps(over).encode())
    answer = json.loads(data)
    refused = answer["error"] if status == 200 else answer
    assert refused["status"] == 400 and "65537 bytes" in refused["detail"]
    assert raw_rows(sink_db, "SELECT count(*) FROM ackledger_inbox WHERE id = 'over-1'") == [(0,)]


@pytest.mark.parametrize(("method", "path"), [("GET", "/events"), ("PUT", "/events/batch")])
def test_other_methods_on_the_hot_paths_are_405(
    conn: http.client.HTTPConnection, method: str, path: str
) -> None:
    status, headers, _ = _call(conn, method, path, b"[]" if method == "PUT" else None)
    assert status == 405
    assert headers["allow"] == "POST"


@pytest.mark.parametrize("body", [lab("x", "s", 1), [lab(f"m{n}", "s", 1) for n in range(17)]])
def test_batch_of_wrong_shape_is_400(conn: http.client.HTTPConnection, body: Any) -> None:
    status, _, answer = _post(conn, "/events/batch", body)
    assert status == 400
    assert answer["field"] == "body"


def test_an_empty_batch_is_200_with_no_acks(conn: http.client.HTTPConnection) -> None:
    assert _post(conn, "/events/batch", [])[::2] == (200, {"acks": []})


def test_batch_with_invalid_item_applies_nothing(
    conn: http.client.HTTPConnection, sink_db: Path
) -> None:
    items = [lab("v1", "s", 1), {**lab("v2", "s", 1), "data": {"sku": "s"}}, lab("v3", "s", 1)]
    status, _, answer = _post(conn, "/events/batch", items)
    assert status == 400
    assert (answer["field"], answer["index"]) == ("data.qty", 1)
    assert raw_rows(sink_db, "SELECT id FROM ackledger_inbox") == []


def test_metrics_count_the_hot_routes(conn: http.client.HTTPConnection) -> None:
    _post(conn, "/events", lab("m1", "s", 1))
    _post(conn, "/events", lab("m1", "s", 2))
    _post(conn, "/events/batch", [lab("m2", "s", 1)])
    _, _, data = _call(conn, "GET", "/metrics")
    text = data.decode()
    count = "ackledger_http_request_duration_seconds_count"
    assert f'{count}{{method="POST",route="/events",status="200"}} 1.0' in text
    assert f'{count}{{method="POST",route="/events",status="422"}} 1.0' in text
    assert f'{count}{{method="POST",route="/events/batch",status="200"}} 1.0' in text
    assert 'ackledger_sink_applied_total{scope="database"} 2.0' in text
    assert 'ackledger_sink_conflicts_total{scope="database"} 1.0' in text


def test_concurrent_clients_each_get_their_own_answer(sink_service: Service, sink_db: Path) -> None:
    # Many keep-alive clients at once: their requests share commits, but each answer must be
    # the one for its own event, and every event is applied exactly once.
    clients, per_client = 12, 15
    answers: dict[str, tuple[int, str]] = {}
    errors: list[BaseException] = []

    def run(client: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", sink_service.port, timeout=30)
        try:
            for number in range(per_client):
                # Every client also re-sends the shared event "common": one applies it.
                event_id = "common" if number == 0 else f"k{client}-{number}"
                sku = "shared" if number == 0 else f"s{client % 3}"
                status, _, body = _post(connection, "/events", lab(event_id, sku, 1))
                assert (body["id"], body["source"]) == (event_id, SOURCE)
                answers[f"{client}:{event_id}"] = (status, body["status"])
        except BaseException as exc:  # reported below, on the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert len(answers) == clients * per_client
    common = [value for key, value in answers.items() if key.endswith(":common")]
    assert sorted(common) == [(200, "applied")] + [(200, "duplicate")] * (clients - 1)
    total = raw_rows(sink_db, "SELECT sum(qty) FROM inventory")[0][0]
    assert total == clients * (per_client - 1) + 1
    assert raw_rows(sink_db, "SELECT count(*) FROM ackledger_inbox") == [
        (clients * (per_client - 1) + 1,)
    ]


def test_group_commit_gathers_one_turn_into_one_call() -> None:
    calls: list[list[int]] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [item * 10 for item in items]

    async def scenario() -> list[int]:
        group: GroupCommit[int, int] = GroupCommit(apply_all)
        first = await asyncio.gather(*(group.submit(n) for n in range(5)))
        second = await group.submit(7)
        return [*first, second]

    assert asyncio.run(scenario()) == [0, 10, 20, 30, 40, 70]
    assert calls == [[0, 1, 2, 3, 4], [7]]


def test_under_concurrency_a_group_waits_a_few_turns_and_a_lone_one_does_not() -> None:
    calls: list[list[int]] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return list(items)

    async def later(group: GroupCommit[int, int], number: int, turns: int) -> int:
        for _ in range(turns):
            await asyncio.sleep(0)  # one turn of the loop
        return await group.submit(number)

    async def scenario() -> None:
        group: GroupCommit[int, int] = GroupCommit(apply_all)
        # Alone: the group goes on the next turn; one submitted two turns later is another.
        await asyncio.gather(group.submit(1), later(group, 2, 2))
        # After a group of two, the next waits: one submitted two turns later joins it.
        await asyncio.gather(group.submit(3), group.submit(4))
        await asyncio.gather(group.submit(5), later(group, 6, 2))
        # Not beyond the wait.
        await asyncio.gather(group.submit(7), later(group, 8, WAIT_TURNS + 2))

    asyncio.run(scenario())
    assert calls == [[1], [2], [3, 4], [5, 6], [7], [8]]


def test_group_commit_failure_reaches_every_member() -> None:
    def apply_all(items: Sequence[int]) -> list[int]:
        raise OSError("disk gone")

    async def scenario() -> list[BaseException | int]:
        group: GroupCommit[int, int] = GroupCommit(apply_all)
        return await asyncio.gather(*(group.submit(n) for n in range(3)), return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert len(outcomes) == 3
    assert all(isinstance(o, OSError) for o in outcomes)


def test_group_commit_serves_one_loop_after_another() -> None:
    """A group used on a second loop in this thread, then on a third in another thread,
    still gathers there."""
    calls: list[list[int]] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [item + 1 for item in items]

    group: GroupCommit[int, int] = GroupCommit(apply_all)

    async def scenario(base: int) -> list[int]:
        return list(await asyncio.gather(*(group.submit(base + n) for n in range(3))))

    assert asyncio.run(scenario(0)) == [1, 2, 3]
    assert asyncio.run(scenario(10)) == [11, 12, 13]
    found: list[list[int]] = []
    thread = threading.Thread(target=lambda: found.append(asyncio.run(scenario(20))))
    thread.start()
    thread.join(30)
    assert found == [[21, 22, 23]]
    assert calls == [[0, 1, 2], [10, 11, 12], [20, 21, 22]]


def test_a_flush_a_stopped_loop_never_ran_does_not_stall_the_next_loop() -> None:
    """A loop that stops between a submit and its flush (a server shut down mid-request)
    leaves a flush that will never run: the next loop's submits must still be applied, and
    the dead loop's item must not be (its request was never answered)."""
    calls: list[list[int]] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [item + 1 for item in items]

    group: GroupCommit[int, int] = GroupCommit(apply_all)
    first = asyncio.new_event_loop()

    left: list[asyncio.Future[int]] = []

    async def leave_one_behind() -> None:
        # The submit's task runs in the loop's last turn; the flush it schedules never does.
        left.append(asyncio.ensure_future(group.submit(1)))

    try:
        first.run_until_complete(leave_one_behind())
    finally:
        first.close()
    assert calls == [] and not left[0].done()

    async def next_loop() -> int:
        return await asyncio.wait_for(group.submit(2), 5)

    assert asyncio.run(next_loop()) == 3
    assert calls == [[2]]


def test_group_commit_answers_each_request_after_the_commit_even_if_one_left() -> None:
    """Every submit of a group returns its own result once ``apply_all`` has returned (its
    commit); a request cancelled meanwhile (its client left) is still applied, and the rest
    of the group is answered all the same."""
    seen: list[str] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        seen.append(f"commit {list(items)}")
        return [item * 10 for item in items]

    async def scenario() -> list[BaseException | int]:
        group: GroupCommit[int, int] = GroupCommit(apply_all)

        async def one(number: int) -> int:
            result = await group.submit(number)
            seen.append(f"answer {number}: {result}")
            return result

        tasks = [asyncio.ensure_future(one(number)) for number in range(3)]
        await asyncio.sleep(0)  # each has submitted; the flush is queued behind them
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert outcomes[0] == 0 and outcomes[2] == 20
    assert isinstance(outcomes[1], asyncio.CancelledError)
    assert seen == ["commit [0, 1, 2]", "answer 0: 0", "answer 2: 20"]


def test_group_commit_in_a_thread_forms_the_next_group_meanwhile() -> None:
    """With a thread, ``apply_all`` runs off the loop, one group at a time: the submits made
    while a group is in the thread wait, form the next group, and each gets its own result
    (set on the loop once the thread is done)."""
    started, release = threading.Event(), threading.Event()
    calls: list[tuple[list[int], bool]] = []

    def apply_all(items: Sequence[int]) -> list[int]:
        calls.append((list(items), threading.current_thread() is not threading.main_thread()))
        if len(calls) == 1:
            started.set()
            release.wait(10)
        return [item * 10 for item in items]

    async def scenario() -> list[int]:
        pool = WarmThreads(1, "test-group")
        try:
            group: GroupCommit[int, int] = GroupCommit(apply_all, thread=pool)
            first = asyncio.ensure_future(group.submit(1))
            while not started.is_set():
                await asyncio.sleep(0.01)
            later = [asyncio.ensure_future(group.submit(number)) for number in (2, 3)]
            await asyncio.sleep(0.1)
            assert not first.done() and not any(task.done() for task in later)
            release.set()
            return [await first, *[await task for task in later]]
        finally:
            pool.close()

    assert asyncio.run(scenario()) == [10, 20, 30]
    assert calls == [([1], True), ([2, 3], True)]
