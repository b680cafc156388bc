"""The ledger's app, asked in-process on a real SQLite file (tests/inprocess.py), and the seed
story with real processes (the concurrency and replica tests run on every backend, through
real processes, in tests/backends/test_ledger_service.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ackledger._dev.demo.ledger import job_reruns
from ackledger._dev.demo.story import Story
from tests.conftest import raw_rows, serve_ledger_in_process
from tests.inprocess import InProcess


def _count(db: Path, table: str) -> int:
    (count,) = raw_rows(db, f"SELECT COUNT(*) FROM ackledger_{table}")[0]
    assert isinstance(count, int)
    return count


def test_new_key_201_then_replayed_200_with_the_ledger_identity(ledger_app: InProcess) -> None:
    client = ledger_app
    status, headers, first = client.deliver(case_id="c", work_id="w", pod_uid="pod-A")
    assert status == 201 and headers.get("Idempotent-Replayed") is None
    _, _, health = client.call("GET", "/healthz")
    assert first == {
        "delivery_no": first["delivery_no"],
        "duplicate": False,
        "attempt": 1,
        "case_id": "c",
        "work_id": "w",
        "mode": "idempotent",
        "state": "in_progress",
        "ledger": {"pod_uid": "ledger-uid-1", "boot_id": health["boot_id"]},
    }
    status, headers, again = client.deliver(case_id="c", work_id="w", pod_uid="pod-B")
    assert status == 200 and headers.get("Idempotent-Replayed") == "true"
    assert (again["delivery_no"], again["duplicate"], again["attempt"]) == (
        first["delivery_no"], True, 2,
    )  # fmt: skip
    status, _, control = client.deliver(case_id="c", work_id="w", mode="control")
    assert status == 201 and control["delivery_no"] != first["delivery_no"]


def test_healthz_is_the_ledgers_own_identity(ledger_app: InProcess) -> None:
    client = ledger_app
    status, _, health = client.call("GET", "/healthz")
    assert status == 200
    assert set(health) == {"pod_uid", "boot_id", "node_boot_id", "started_at"}
    assert health["pod_uid"] == "ledger-uid-1"
    assert health["node_boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert isinstance(health["started_at"], float) and len(health["boot_id"]) >= 16


def test_without_pod_uid_the_ledger_names_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_UID", raising=False)
    with serve_ledger_in_process(str(tmp_path / "l.db")) as client:
        _, _, health = client.call("GET", "/healthz")
    assert health["pod_uid"] == f"local-{socket.gethostname()}"


def test_a_payload_conflict_is_422_recorded_and_delivers_nothing(
    ledger_app: InProcess, ledger_db: Path
) -> None:
    client = ledger_app
    client.deliver(case_id="c", work_id="w", pod_uid="pod-A", payload={"qty": 1})
    status, headers, problem = client.deliver(
        case_id="c", work_id="w", pod_uid="pod-B", payload={"qty": 2}
    )
    assert status == 422
    assert headers.get("Content-Type") == "application/problem+json"
    assert problem["status"] == 422 and problem["attempt"] == 2
    assert problem["ledger"]["pod_uid"] == "ledger-uid-1"
    _, _, attempts = client.call("GET", "/attempts?case_id=c")
    assert [(a["pod_uid"], a["outcome"], a["delivery_no"]) for a in attempts][1] == (
        "pod-B", "conflict", None,
    )  # fmt: skip
    assert _count(ledger_db, "deliveries") == 1


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
    ledger_app: InProcess, ledger_db: Path
) -> None:
    client = ledger_app
    for body, field in BAD_BODIES:
        status, headers, problem = client.call("POST", "/deliveries", body)
        assert (status, problem.get("field")) == (400, field), body[:80]
        assert headers.get("Content-Type") == "application/problem+json"
        assert problem["detail"].startswith(f"{field}:")
        assert problem["ledger"]["pod_uid"] == "ledger-uid-1"  # every answer says who answered
    status, _, problem = client.call("POST", "/deliveries", b"{" + b" " * (64 * 1024) + b"}")
    assert status == 413 and problem["status"] == 413 and "boot_id" in problem["ledger"]
    assert _count(ledger_db, "attempts") == 0
    assert _count(ledger_db, "deliveries") == 0
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_counters") == [(0,)]


def test_listings_take_only_a_valid_case_id(ledger_app: InProcess) -> None:
    client = ledger_app
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


def _metrics(client: InProcess) -> dict[str, float]:
    status, _, text = client.call("GET", "/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            name = sample.name
            if (
                name.startswith("ackledger_ledger_")
                and name.endswith("_total")
                and sample.labels == {"scope": "database"}
            ):
                found[name] = sample.value
    return found


def test_metrics_count_durably_across_a_restart(ledger_db: Path) -> None:
    expected = {
        "ackledger_ledger_attempts_total": 5.0,
        "ackledger_ledger_deliveries_total": 3.0,
        "ackledger_ledger_duplicates_total": 1.0,
        "ackledger_ledger_conflicts_total": 1.0,
    }
    with serve_ledger_in_process(str(ledger_db)) as client:
        assert _metrics(client) == dict.fromkeys(expected, 0.0)
        client.deliver(case_id="c", work_id="w1")
        client.deliver(case_id="c", work_id="w1")
        client.deliver(case_id="c", work_id="w1", payload={"x": 1})
        client.deliver(case_id="c", work_id="w2", mode="control")
        client.deliver(case_id="c", work_id="w2", mode="control")
        client.call("POST", "/deliveries", b"{}")  # invalid: counted nowhere above
        assert _metrics(client) == expected
    with serve_ledger_in_process(str(ledger_db)) as client:  # a restart: a new app and Ledger
        assert _metrics(client) == expected


def test_openapi_describes_the_routes(ledger_app: InProcess) -> None:
    client = ledger_app
    status, _, spec = client.call("GET", "/openapi.json")
    assert status == 200
    assert {"/deliveries", "/attempts", "/healthz", "/metrics"} <= set(spec["paths"])
    post = spec["paths"]["/deliveries"]["post"]
    assert {"200", "201", "400", "413", "422"} <= set(post["responses"])
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["case_id", "work_id", "pod_uid", "mode"]


@pytest.mark.slow
def test_the_seed_story_runs_with_real_processes(tmp_path: Path) -> None:
    story = Story()
    job_reruns(story, tmp_path)
    assert story.failed == []
    assert len(story.checks) >= 10
    attempts = raw_rows(
        tmp_path / "ledger.db",
        "SELECT pod_uid, outcome, claim FROM ackledger_attempts WHERE case_id = 'seed-002' "
        "ORDER BY attempt_no",
    )
    assert [row[1] for row in attempts] == [
        "applied", "duplicate", "duplicate", "duplicate", "applied", "conflict",
    ]  # fmt: skip
    assert [row[0] for row in attempts][:3] == ["pod-A", "pod-B", "pod-C"]
    # A died holding the claim, B found it live, C took it over: the work ran once, by C.
    assert [row[2] for row in attempts][:3] == ["claimed", "in_flight", "taken_over"]
    assert raw_rows(
        tmp_path / "ledger.db",
        "SELECT state, completed_by FROM ackledger_deliveries WHERE work_id = 'order-1001' "
        "AND case_id = 'seed-002'",
    ) == [("completed", "pod-C")]
    control = raw_rows(
        tmp_path / "ledger.db",
        "SELECT COUNT(*) FROM ackledger_deliveries WHERE case_id = 'seed-002-control' AND "
        "work_id = ?",
        ("order-1001",),
    )
    assert control == [(2,)]
