"""The ledger service and commands on every backend: real processes, real HTTP, concurrent
clients and two ledger processes (replicas) on one database; the answers per contract of the
app in-process. Everything is read back through a connection of the test's own."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ackledger import Ledger
from ackledger.ledger.ledger import COUNTER_NAMES
from ackledger.ops.processes import Service, run_cli, start_service

from ..conftest import serve_ledger_in_process
from ..inprocess import InProcess
from ..race import Client, at_once, connected
from . import purge_race
from .conftest import Target

pytestmark = pytest.mark.slow

StartLedger = Callable[[str], Service]


@pytest.fixture
def start_ledger(target: Target, tmp_path: Path) -> Iterator[StartLedger]:
    """Starts ``ackledger serve ledger --db TARGET --port 0`` processes, stopped at the end."""
    running: list[Service] = []

    def start(name: str) -> Service:
        service = start_service(
            ["serve", "ledger", "--db", target.ref, "--port", "0"],
            env={"POD_UID": f"ledger-{name}"},
            stderr_path=tmp_path / f"ledger-{name}.log",
        )
        running.append(service)
        return service

    yield start
    for service in running:
        service.stop()


#: Rounds of a race, a fresh key each. The first round also fills each process's connection
#: pool (PostgreSQL: it grows while requests wait), so in the later rounds every process has
#: several transactions in flight at once: that is where a check-then-insert claim fails.
ROUNDS = 4


def race_for_one_key(services: list[Service], key: str, clients: int = 32) -> list[dict[str, Any]]:
    """``clients`` connections, spread over ``services`` in turn, ask for one key at once."""
    pool = [Client(services[i % len(services)]) for i in range(clients)]
    try:
        answers = at_once(
            pool,
            lambda i, client: client.deliver(case_id="race", work_id=key, pod_uid=f"p{i}"),
            ready=connected,
        )
    finally:
        for client in pool:
            client.close()
    assert sorted(status for status, _, _ in answers) == [200] * (clients - 1) + [201], answers
    return [body for _, _, body in answers]


def assert_one_delivery(target: Target, key: str, answers: list[dict[str, Any]]) -> None:
    """One delivery for the key, and one attempt row per request, all naming that delivery."""
    clients = len(answers)
    (number,) = {answer["delivery_no"] for answer in answers}
    assert sorted(answer["attempt"] for answer in answers) == list(range(1, clients + 1))
    assert sorted(answer["duplicate"] for answer in answers) == [False] + [True] * (clients - 1)
    assert target.rows(
        "SELECT delivery_no, case_id, mode FROM ackledger_deliveries WHERE work_id = ?", (key,)
    ) == [(number, "race", "idempotent")]
    assert target.rows(
        "SELECT outcome, COUNT(*), COUNT(DISTINCT pod_uid), MIN(delivery_no), MAX(delivery_no) "
        "FROM ackledger_attempts WHERE work_id = ? GROUP BY outcome ORDER BY outcome",
        (key,),
    ) == [
        ("applied", 1, 1, number, number),
        ("duplicate", clients - 1, clients - 1, number, number),
    ]


def assert_counters(target: Target, keys: int, clients: int = 32) -> None:
    """The durable counters (``/metrics``) agree with the rows. On PostgreSQL a counter is
    spread over rows ``NAME#N`` (so that concurrent requests do not queue on one row)."""
    totals: dict[str, int] = {}
    for name, value in target.rows(
        "SELECT name, value FROM ackledger_counters WHERE name LIKE ?", ("ledger.%",)
    ):
        short = name.split("#", 1)[0]
        totals[short] = totals.get(short, 0) + value
    assert totals == {
        "ledger.attempts": keys * clients,
        "ledger.deliveries": keys,
        "ledger.duplicates": keys * (clients - 1),
    }
    assert target.rows("SELECT COUNT(*) FROM ackledger_deliveries") == [(keys,)]


def test_32_concurrent_requests_for_one_key_get_one_number(
    target: Target, start_ledger: StartLedger
) -> None:
    ledger = start_ledger("a")
    for round_no in range(ROUNDS):
        key = f"k{round_no}"
        assert_one_delivery(target, key, race_for_one_key([ledger], key))
    assert_counters(target, ROUNDS)


def test_two_ledger_processes_on_one_database_hand_out_one_number(
    target: Target, start_ledger: StartLedger
) -> None:
    """Replicas: two ledger processes share the database and answer the same key at once."""
    first, second = start_ledger("a"), start_ledger("b")
    for round_no in range(ROUNDS):
        key = f"k{round_no}"
        answers = race_for_one_key([first, second], key)
        assert {answer["ledger"]["pod_uid"] for answer in answers} == {"ledger-a", "ledger-b"}
        assert_one_delivery(target, key, answers)
    assert_counters(target, ROUNDS)
    # Each replica hands out the other's numbers: the memory is the database, not the process.
    numbers = {
        work_id: number
        for work_id, number in target.rows("SELECT work_id, delivery_no FROM ackledger_deliveries")
    }
    for service in (first, second):
        client = Client(service)
        for key, number in numbers.items():
            status, _, again = client.deliver(case_id="race", work_id=key, pod_uid="late")
            assert (status, again["delivery_no"]) == (200, number)
        client.close()


def test_8_clients_x_50_keys_then_a_crash_and_restart_keeps_every_number(
    target: Target, start_ledger: StartLedger
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

    first = start_ledger("first")
    looker = Client(first)
    _, _, before = looker.call("GET", "/healthz")
    looker.close()
    threads = [threading.Thread(target=run, args=(first, i)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    first.stop(signal.SIGKILL)  # kill -9: only what was committed can survive
    assert errors == []
    assert len(numbers) == 400 and len(set(numbers.values())) == 400
    assert sorted(
        (int(case_id.removeprefix("client-")), int(work_id.removeprefix("key-")), number)
        for case_id, work_id, number in target.rows(
            "SELECT case_id, work_id, delivery_no FROM ackledger_deliveries"
        )
    ) == sorted((i, k, number) for (i, k), number in numbers.items())

    second = start_ledger("second")
    client = Client(second)
    _, _, after = client.call("GET", "/healthz")
    assert after["boot_id"] != before["boot_id"]  # another incarnation, same database
    for (i, k), number in sorted(numbers.items()):
        status, _, answer = client.deliver(case_id=f"client-{i}", work_id=f"key-{k}")
        assert (status, answer["delivery_no"], answer["attempt"]) == (200, number, 2)
    client.close()
    assert target.rows("SELECT COUNT(*) FROM ackledger_deliveries") == [(400,)]
    assert target.rows("SELECT COUNT(*) FROM ackledger_attempts") == [(800,)]


def test_purge_command_forgets_idle_keys_and_a_purged_key_starts_fresh(target: Target) -> None:
    with Ledger(target.ref) as ledger:
        old = ledger.request("c", "old", "pod-A")["delivery_no"]
        live = ledger.request("c", "live", "pod-A")["delivery_no"]
    target.execute("UPDATE ackledger_attempts SET at = at - 3 * 86400 WHERE work_id = 'old'")

    kept = run_cli("ledger", "purge", "--db", target.ref)  # the default: 30 days
    assert kept.returncode == 0 and "purged 0 deliveries" in kept.stdout
    done = run_cli("ledger", "purge", "--db", target.ref, "--older-than", "2d")
    assert done.returncode == 0, done.stderr
    assert "purged 1 deliveries and 1 attempts" in done.stdout
    assert target.rows("SELECT work_id FROM ackledger_deliveries") == [("live",)]
    with Ledger(target.ref) as ledger:
        fresh = ledger.request("c", "old", "pod-B")
        assert ledger.request("c", "live", "pod-B")["delivery_no"] == live
    assert fresh["duplicate"] is False and fresh["delivery_no"] not in (old, live)


def test_the_service_answers_per_contract(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind of answer once, on each backend, of the app in-process (on PostgreSQL the
    requests run on the app's worker threads, refusals included, as when served)."""
    monkeypatch.setenv("POD_UID", "ledger-a")
    with serve_ledger_in_process(target.ref) as client:
        _answers_per_contract(client)
    assert target.rows("SELECT COUNT(*) FROM ackledger_attempts") == [(4,)]


def _answers_per_contract(client: InProcess) -> None:
    status, headers, first = client.deliver(case_id="c", work_id="w", pod_uid="pod-A")
    assert status == 201 and first["ledger"]["pod_uid"] == "ledger-a"
    status, headers, again = client.deliver(case_id="c", work_id="w", pod_uid="pod-B")
    assert (status, headers.get("Idempotent-Replayed")) == (200, "true")
    assert (again["delivery_no"], again["attempt"]) == (first["delivery_no"], 2)
    status, headers, problem = client.deliver(case_id="c", work_id="w", payload={"x": 1})
    assert (status, problem["attempt"]) == (422, 3)
    assert headers.get("Content-Type") == "application/problem+json"
    status, _, problem = client.deliver(case_id="c", work_id="w w")
    assert (status, problem["field"]) == (400, "work_id")
    status, _, control = client.deliver(case_id="c", work_id="w", mode="control")
    assert status == 201 and control["delivery_no"] != first["delivery_no"]
    _, _, deliveries = client.call("GET", "/deliveries?case_id=c")
    assert [d["delivery_no"] for d in deliveries] == [first["delivery_no"], control["delivery_no"]]
    _, _, attempts = client.call("GET", "/attempts?case_id=c")
    assert [a["outcome"] for a in attempts] == ["applied", "duplicate", "conflict", "applied"]
    status, _, text = client.call("GET", "/metrics")
    assert status == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.labels == {"scope": "database"}
    }
    assert {name: samples[f"ackledger_ledger_{name}_total"] for name in COUNTER_NAMES} == {
        "attempts": 4, "deliveries": 2, "duplicates": 1, "conflicts": 1,
    }  # fmt: skip


def test_a_purge_racing_requests_over_http_never_answers_500(
    target: Target, start_ledger: StartLedger
) -> None:
    """``serve ledger`` while a purge removes the keys being asked for: every request is
    answered 200/201 and continues its key or starts it fresh (purge_race)."""
    service = start_ledger("a")
    clients = {i: Client(service) for i in range(1, purge_race.SENDERS + 1)}

    def send(i: int, work_id: str) -> dict[str, Any]:
        status, _, body = clients[i].deliver(
            case_id=purge_race.CASE, work_id=work_id, pod_uid=f"p{i}"
        )
        assert status in (200, 201), (status, body)
        assert isinstance(body, dict)
        return body

    try:
        purge_race.run_rounds(target, send, ready=lambda i: connected(clients[i]) if i else None)
    finally:
        for client in clients.values():
            client.close()
