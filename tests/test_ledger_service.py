"""The ledger service as a real ``ackledger serve ledger`` process on loopback."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ackledger.demo.ledger import job_reruns
from ackledger.demo.story import Story
from ackledger.procs import Service, start_service
from tests.conftest import raw_rows

pytestmark = pytest.mark.slow


def _start(db: Path, log: Path, env: dict[str, str] | None = None) -> Service:
    return start_service(
        ["serve", "ledger", "--db", str(db), "--port", "0"], env=env, stderr_path=log
    )


class Client:
    """One HTTP connection of its own (kept alive across its requests)."""

    def __init__(self, service: Service) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)

    def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, http.client.HTTPResponse, Any]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, response, json.loads(data) if data[:1] in (b"{", b"[") else data

    def deliver(self, **fields: Any) -> tuple[int, http.client.HTTPResponse, Any]:
        body = {"pod_uid": "pod", "mode": "idempotent", **fields}
        return self.call("POST", "/deliveries", json.dumps(body).encode())

    def close(self) -> None:
        self.conn.close()


def _count(db: Path, table: str) -> int:
    (count,) = raw_rows(db, f"SELECT COUNT(*) FROM {table}")[0]
    assert isinstance(count, int)
    return count


def test_new_key_201_then_replayed_200_with_the_ledger_identity(ledger_service: Service) -> None:
    client = Client(ledger_service)
    status, response, first = client.deliver(case_id="c", work_id="w", pod_uid="pod-A")
    assert status == 201 and response.getheader("Idempotent-Replayed") is None
    _, _, health = client.call("GET", "/healthz")
    assert first == {
        "delivery_no": first["delivery_no"],
        "duplicate": False,
        "attempt": 1,
        "case_id": "c",
        "work_id": "w",
        "mode": "idempotent",
        "ledger": {"pod_uid": "ledger-uid-1", "boot_id": health["boot_id"]},
    }
    status, response, again = client.deliver(case_id="c", work_id="w", pod_uid="pod-B")
    assert status == 200 and response.getheader("Idempotent-Replayed") == "true"
    assert (again["delivery_no"], again["duplicate"], again["attempt"]) == (
        first["delivery_no"], True, 2,
    )  # fmt: skip
    status, _, control = client.deliver(case_id="c", work_id="w", mode="control")
    assert status == 201 and control["delivery_no"] != first["delivery_no"]
    client.close()


def test_healthz_is_the_ledgers_own_identity(ledger_service: Service) -> None:
    client = Client(ledger_service)
    status, _, health = client.call("GET", "/healthz")
    assert status == 200
    assert set(health) == {"pod_uid", "boot_id", "node_boot_id", "started_at"}
    assert health["pod_uid"] == "ledger-uid-1"
    assert health["node_boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert isinstance(health["started_at"], float) and len(health["boot_id"]) >= 16
    client.close()


def test_without_pod_uid_the_ledger_names_its_host(tmp_path: Path) -> None:
    if "POD_UID" in os.environ:  # pragma: no cover - start_service passes the environment on
        pytest.skip("POD_UID is set in this environment")
    with _start(tmp_path / "l.db", tmp_path / "l.log") as running:
        client = Client(running)
        _, _, health = client.call("GET", "/healthz")
        client.close()
    assert health["pod_uid"] == f"local-{socket.gethostname()}"


def test_a_payload_conflict_is_422_recorded_and_delivers_nothing(
    ledger_service: Service, ledger_db: Path
) -> None:
    client = Client(ledger_service)
    client.deliver(case_id="c", work_id="w", pod_uid="pod-A", payload={"qty": 1})
    status, response, problem = client.deliver(
        case_id="c", work_id="w", pod_uid="pod-B", payload={"qty": 2}
    )
    assert status == 422
    assert response.getheader("Content-Type") == "application/problem+json"
    assert problem["status"] == 422 and problem["attempt"] == 2
    assert problem["ledger"]["pod_uid"] == "ledger-uid-1"
    _, _, attempts = client.call("GET", "/attempts?case_id=c")
    assert [(a["pod_uid"], a["outcome"], a["delivery_no"]) for a in attempts][1] == (
        "pod-B", "conflict", None,
    )  # fmt: skip
    assert _count(ledger_db, "deliveries") == 1
    client.close()


BAD_BODIES: list[tuple[bytes, str]] = [
    (b"not json", "body"),
    (b"", "body"),
    (b"[1, 2]", "body"),
    (b'"text"', "body"),
    (b"[" * 60_000, "body"),
    (b'{"work_id": "w", "pod_uid": "p", "mode": "idempotent"}', "case_id"),
    (b'{"case_id": "c", "pod_uid": "p", "mode": "idempotent"}', "work_id"),
    (b'{"case_id": "c", "work_id": "w", "mode": "idempotent"}', "pod_uid"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "p"}', "mode"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent", "x": 1}', "x"),
    (b'{"case_id": "", "work_id": "w", "pod_uid": "p", "mode": "idempotent"}', "case_id"),
    (b'{"case_id": 12, "work_id": "w", "pod_uid": "p", "mode": "idempotent"}', "case_id"),
    (
        b'{"case_id": "c", "work_id": "' + b"w" * 129 + b'", "pod_uid": "p", "mode": "control"}',
        "work_id",
    ),
    (b'{"case_id": "c", "work_id": "w w", "pod_uid": "p", "mode": "idempotent"}', "work_id"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "", "mode": "idempotent"}', "pod_uid"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "\\u00e9", "mode": "control"}', "pod_uid"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": null, "mode": "control"}', "pod_uid"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "exactly-once"}', "mode"),
    (b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": true}', "mode"),
    (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "payload": []}',
        "payload",
    ),
    (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "payload": 1}',
        "payload",
    ),
    (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "payload": '
        b'{"a": NaN}}',
        "payload",
    ),
    (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "payload": '
        b'{"a": "\\ud800"}}',
        "payload",
    ),
    (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "payload": '
        + b'{"a": ' * 40
        + b"1"
        + b"}" * 41,
        "payload",
    ),
]


def test_bad_bodies_are_400_naming_the_field_and_record_nothing(
    ledger_service: Service, ledger_db: Path
) -> None:
    client = Client(ledger_service)
    for body, field in BAD_BODIES:
        status, response, problem = client.call("POST", "/deliveries", body)
        assert (status, problem.get("field")) == (400, field), body[:80]
        assert response.getheader("Content-Type") == "application/problem+json"
        assert problem["detail"].startswith(f"{field}:")
        assert problem["ledger"]["pod_uid"] == "ledger-uid-1"  # every answer says who answered
    status, _, problem = client.call("POST", "/deliveries", b"{" + b" " * (64 * 1024) + b"}")
    assert status == 413 and problem["status"] == 413 and "boot_id" in problem["ledger"]
    client.close()
    assert _count(ledger_db, "attempts") == 0
    assert _count(ledger_db, "deliveries") == 0
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM counters") == [(0,)]


def test_listings_take_only_a_valid_case_id(ledger_service: Service) -> None:
    client = Client(ledger_service)
    client.deliver(case_id="a", work_id="w1")
    client.deliver(case_id="b", work_id="w1")
    _, _, everything = client.call("GET", "/deliveries")
    _, _, only_a = client.call("GET", "/deliveries?case_id=a")
    assert [d["case_id"] for d in everything] == ["a", "b"]
    assert [d["case_id"] for d in only_a] == ["a"]
    for path, field in [
        ("/deliveries?case_id=bad%20id", "case_id"),
        ("/attempts?case_id=", "case_id"),
        ("/attempts?cas_id=a", "cas_id"),
    ]:
        status, _, problem = client.call("GET", path)
        assert (status, problem["field"]) == (400, field)
    client.close()


def _metrics(client: Client) -> dict[str, float]:
    status, _, text = client.call("GET", "/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            name = sample.name
            if (
                name.startswith("ackledger_ledger_")
                and name.endswith("_total")
                and not sample.labels
            ):
                found[name] = sample.value
    return found


def test_metrics_count_durably_across_a_restart(ledger_db: Path, tmp_path: Path) -> None:
    expected = {
        "ackledger_ledger_attempts_total": 5.0,
        "ackledger_ledger_deliveries_total": 3.0,
        "ackledger_ledger_duplicates_total": 1.0,
        "ackledger_ledger_conflicts_total": 1.0,
    }
    with _start(ledger_db, tmp_path / "a.log") as running:
        client = Client(running)
        assert _metrics(client) == dict.fromkeys(expected, 0.0)
        client.deliver(case_id="c", work_id="w1")
        client.deliver(case_id="c", work_id="w1")
        client.deliver(case_id="c", work_id="w1", payload={"x": 1})
        client.deliver(case_id="c", work_id="w2", mode="control")
        client.deliver(case_id="c", work_id="w2", mode="control")
        client.call("POST", "/deliveries", b"{}")  # invalid: counted nowhere above
        assert _metrics(client) == expected
        client.close()
    with _start(ledger_db, tmp_path / "b.log") as running:
        client = Client(running)
        assert _metrics(client) == expected
        client.close()


def test_openapi_describes_the_routes(ledger_service: Service) -> None:
    client = Client(ledger_service)
    status, _, spec = client.call("GET", "/openapi.json")
    client.close()
    assert status == 200
    assert {"/deliveries", "/attempts", "/healthz", "/metrics"} <= set(spec["paths"])
    post = spec["paths"]["/deliveries"]["post"]
    assert {"200", "201", "400", "413", "422"} <= set(post["responses"])
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["case_id", "work_id", "pod_uid", "mode"]


def test_32_concurrent_requests_for_one_key_get_one_number(
    ledger_service: Service, ledger_db: Path
) -> None:
    clients = [Client(ledger_service) for _ in range(32)]
    for client in clients:
        client.conn.connect()  # 32 open connections before anyone sends
    start = threading.Barrier(len(clients))
    answers: list[tuple[int, Any]] = []
    errors: list[BaseException] = []

    def run(i: int, client: Client) -> None:
        try:
            start.wait()
            status, _, answer = client.deliver(case_id="race", work_id="order-1", pod_uid=f"p{i}")
            answers.append((status, answer))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    assert errors == []
    assert sorted(status for status, _ in answers) == [200] * 31 + [201]
    assert len({answer["delivery_no"] for _, answer in answers}) == 1
    assert sorted(answer["attempt"] for _, answer in answers) == list(range(1, 33))
    assert _count(ledger_db, "deliveries") == 1
    assert raw_rows(ledger_db, "SELECT COUNT(DISTINCT pod_uid), COUNT(*) FROM attempts") == [
        (32, 32)
    ]


def test_8_clients_x_50_keys_then_a_crash_and_restart_keeps_every_number(
    ledger_db: Path, tmp_path: Path
) -> None:
    numbers: dict[tuple[int, int], int] = {}
    errors: list[BaseException] = []

    def run(service: Service, i: int) -> None:
        client = Client(service)
        try:
            for k in range(50):
                status, _, answer = client.deliver(case_id=f"client-{i}", work_id=f"key-{k}")
                assert status == 201, answer
                numbers[(i, k)] = answer["delivery_no"]
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    first = _start(ledger_db, tmp_path / "first.log")
    try:
        looker = Client(first)
        _, _, before = looker.call("GET", "/healthz")
        looker.close()
        threads = [threading.Thread(target=run, args=(first, i)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        first.stop(signal.SIGKILL)  # kill -9: only what was committed can survive
    assert errors == []
    assert len(numbers) == 400 and len(set(numbers.values())) == 400
    assert _count(ledger_db, "deliveries") == 400

    with _start(ledger_db, tmp_path / "second.log") as second:
        client = Client(second)
        _, _, after = client.call("GET", "/healthz")
        assert after["boot_id"] != before["boot_id"]  # another incarnation, same file
        for (i, k), number in sorted(numbers.items()):
            status, _, answer = client.deliver(case_id=f"client-{i}", work_id=f"key-{k}")
            assert (status, answer["delivery_no"], answer["attempt"]) == (200, number, 2)
        client.close()
    assert _count(ledger_db, "deliveries") == 400


def test_the_seed_story_runs_with_real_processes(tmp_path: Path) -> None:
    story = Story()
    job_reruns(story, tmp_path)
    assert story.failed == []
    assert len(story.checks) >= 10
    attempts = raw_rows(
        tmp_path / "ledger.db",
        "SELECT pod_uid, outcome FROM attempts WHERE case_id = 'seed-002' ORDER BY attempt_no",
    )
    assert [row[1] for row in attempts] == [
        "applied", "duplicate", "duplicate", "applied", "conflict",
    ]  # fmt: skip
    assert [row[0] for row in attempts][:2] == ["pod-A", "pod-B"]
    control = raw_rows(
        tmp_path / "ledger.db",
        "SELECT COUNT(*) FROM deliveries WHERE case_id = 'seed-002-control' AND work_id = ?",
        ("order-1001",),
    )
    assert control == [(2,)]
