"""Ledger outcomes at the edges: ``deliver --run`` as real worker processes against a real
``serve ledger``, and the outcome routes' answers to bad input (the app in-process)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows
from tests.inprocess import InProcess


def _deliver(service: Service, work_id: str, pod: str, *args: str) -> list[str]:
    return [
        "deliver", "--ledger", service.base_url + "/deliveries", "--case-id", "c",
        "--work-id", work_id, "--pod-uid", pod, *args,
    ]  # fmt: skip


def _work(log: Path, status: int = 0) -> str:
    """A CMD that appends one line per run to ``log`` (the work's one effect), then exits."""
    code = (
        "import os, sys; open(sys.argv[1], 'a').write(os.environ['ACKLEDGER_DELIVERY_NO'] + "
        "'\\n'); print('working'); sys.exit(int(sys.argv[2]))"
    )
    return shlex.join([sys.executable, "-c", code, str(log), str(status)])


def _runs(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _attempts(db: Path, work_id: str) -> list[tuple[Any, ...]]:
    return raw_rows(
        db,
        "SELECT pod_uid, claim, exit_status FROM ackledger_attempts WHERE work_id = ? ORDER "
        "BY attempt_no",
        (work_id,),
    )


@pytest.mark.slow
def test_run_does_the_work_once_and_a_new_job_learns_it_was_completed(
    ledger_service: Service, ledger_db: Path, tmp_path: Path
) -> None:
    log = tmp_path / "effects.txt"
    # Pod A takes the claim, then dies before the work (the drill): nothing ran.
    died = run_cli(
        *_deliver(ledger_service, "w", "pod-A", "--run", _work(log), "--fail-after-save")
    )
    assert died.returncode == 75 and died.stdout == "" and _runs(log) == []
    # Pod B comes while A's claim is live: 409, exit 1, the work is not run a second time.
    early = run_cli(*_deliver(ledger_service, "w", "pod-B", "--run", _work(log)))
    assert early.returncode == 1 and "in flight" in early.stderr and "pod-A" in early.stderr
    assert _runs(log) == []
    # Once A's claim is older than B's --claim-ttl, B takes it over and does the work.
    time.sleep(1.2)
    took = run_cli(*_deliver(ledger_service, "w", "pod-B", "--run", _work(log), "--claim-ttl", "1"))
    assert took.returncode == 0, took.stderr
    answer = json.loads(took.stdout)  # stdout is the answer only: CMD's output went to stderr
    assert "working" in took.stderr and answer["ran"] is True
    assert answer["state"] == "completed" and answer["completed_by"] == "pod-B"
    assert answer["result"]["exit_status"] == 0 and "claim" not in answer
    assert _runs(log) == [str(answer["delivery_no"])]
    # A new Job for the same business key: same delivery, told it is completed, runs nothing.
    rerun = run_cli(*_deliver(ledger_service, "w", "pod-C", "--run", _work(log)))
    assert rerun.returncode == 0, rerun.stderr
    again = json.loads(rerun.stdout)
    assert (again["delivery_no"], again["state"], again["ran"]) == (
        answer["delivery_no"], "completed", False,
    )  # fmt: skip
    assert again["result"] == answer["result"] and _runs(log) == [str(answer["delivery_no"])]
    assert _attempts(ledger_db, "w") == [
        ("pod-A", "claimed", None),
        ("pod-B", "in_flight", None),
        ("pod-B", "taken_over", 0),
        ("pod-C", None, None),
    ]


@pytest.mark.slow
def test_a_failing_run_releases_its_claim_and_the_next_pod_runs_at_once(
    ledger_service: Service, ledger_db: Path, tmp_path: Path
) -> None:
    log = tmp_path / "effects.txt"
    failed = run_cli(*_deliver(ledger_service, "w", "pod-A", "--run", _work(log, 3)))
    assert failed.returncode == 3 and failed.stdout == ""
    assert "stays in progress" in failed.stderr
    missing = run_cli(*_deliver(ledger_service, "w", "pod-B", "--run", "no-such-command-here"))
    assert missing.returncode == 127 and "command not found" in missing.stderr
    retry = run_cli(*_deliver(ledger_service, "w", "pod-C", "--run", _work(log)))
    assert retry.returncode == 0, retry.stderr
    assert len(_runs(log)) == 2  # the failed run and the retry; no wait for a claim to expire
    assert _attempts(ledger_db, "w") == [
        ("pod-A", "claimed", 3),
        ("pod-B", "claimed", 127),
        ("pod-C", "claimed", 0),
    ]


@pytest.mark.slow
def test_run_is_one_string_for_the_shell(
    ledger_service: Service, ledger_db: Path, tmp_path: Path
) -> None:
    """CMD is run by ``/bin/sh -c``: its redirection, ``;`` and ``exit`` are the shell's."""
    log = tmp_path / "work.log"
    failing = f"echo x >> {shlex.quote(str(log))}; exit 3"
    failed = run_cli(*_deliver(ledger_service, "w", "pod-A", "--run", failing))
    assert failed.returncode == 3, failed.stderr
    assert failed.stdout == "" and "stays in progress" in failed.stderr
    assert log.read_text() == "x\n"  # the shell wrote it: echo did not print '>>'
    # The claim was released: the next Pod runs at once, and its exit 0 completes the work.
    passing = f'echo "done $ACKLEDGER_DELIVERY_NO" >> {shlex.quote(str(log))}'
    done = run_cli(*_deliver(ledger_service, "w", "pod-B", "--run", passing))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["state"] == "completed" and answer["ran"] is True
    assert log.read_text() == f"x\ndone {answer['delivery_no']}\n"
    assert _attempts(ledger_db, "w") == [("pod-A", "claimed", 3), ("pod-B", "claimed", 0)]


@pytest.mark.slow
def test_bad_run_options_are_one_line_exit_2_and_record_nothing(
    ledger_service: Service, ledger_db: Path
) -> None:
    for extra, flag in [
        (["--claim-ttl", "60"], "--claim-ttl"),
        (["--run", ""], "--run"),
        (["--run", "  "], "--run"),
        (["--run", "if true; then echo"], "--run"),
        (["--run", "echo 'unclosed"], "--run"),
        (["--run", "true", "--claim-ttl", "2d"], "--claim-ttl"),
        (["--run", "true", "--claim-ttl", "0"], "--claim-ttl"),
        (["--run", "true", "--claim-ttl", "soon"], "--claim-ttl"),
    ]:
        done = run_cli(*_deliver(ledger_service, "w", "pod-A", *extra))
        assert done.returncode == 2, (extra, done.stderr)
        assert done.stderr.count("\n") == 1 and flag in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(0,)]


BAD_REPORTS: list[tuple[str, object, str]] = [
    ("/deliveries/complete", [], "body"),
    ("/deliveries/complete", {"work_id": "w"}, "case_id"),
    ("/deliveries/complete", {"case_id": "c"}, "work_id"),
    ("/deliveries/complete", {"case_id": "c", "work_id": "w", "extra": 1}, "extra"),
    ("/deliveries/complete", {"case_id": "c", "work_id": "w", "claim": 7}, "claim"),
    ("/deliveries/complete", {"case_id": "c", "work_id": "w", "pod_uid": ""}, "pod_uid"),
    ("/deliveries/release", {"case_id": "c", "work_id": "w"}, "claim"),
    ("/deliveries/release", {"case_id": "c", "work_id": "w", "claim": "0" * 32,
                             "exit_status": 1.5}, "exit_status"),
    ("/deliveries/release", {"case_id": "c", "work_id": "w", "claim": "0" * 32,
                             "result": 1}, "result"),
    ("/deliveries", {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent",
                     "claim_ttl": "300"}, "claim_ttl"),
]  # fmt: skip


def test_outcome_routes_refuse_bad_bodies_naming_the_field_and_record_nothing(
    ledger_app: InProcess, ledger_db: Path
) -> None:
    first = ledger_app.deliver(case_id="c", work_id="w", claim_ttl=60)
    assert first[0] == 201
    before = raw_rows(ledger_db, "SELECT * FROM ackledger_deliveries") + raw_rows(
        ledger_db, "SELECT * FROM ackledger_attempts"
    )
    for path, body, field in BAD_REPORTS:
        status, headers, problem = ledger_app.post(path, body)
        assert (status, problem.get("field")) == (400, field), (path, body)
        assert headers.get("Content-Type") == "application/problem+json"
        assert problem["ledger"]["pod_uid"] == "ledger-uid-1"
    status, _, problem = ledger_app.post("/deliveries/complete", {"case_id": "c", "work_id": "x"})
    assert status == 404 and problem["type"].endswith("/unknown-delivery")
    after = raw_rows(ledger_db, "SELECT * FROM ackledger_deliveries") + raw_rows(
        ledger_db, "SELECT * FROM ackledger_attempts"
    )
    assert after == before


def test_the_service_answers_in_flight_completed_and_released(ledger_app: InProcess) -> None:
    status, _, first = ledger_app.deliver(case_id="c", work_id="w", pod_uid="A", claim_ttl=60)
    assert status == 201 and first["claim"]["ttl"] == 60
    status, headers, busy = ledger_app.deliver(case_id="c", work_id="w", pod_uid="B", claim_ttl=60)
    assert status == 409 and busy["claimed_by"] == "A" and busy["attempt"] == 2
    assert 1 <= int(headers["Retry-After"]) <= 60
    token = first["claim"]["token"]
    status, _, gone = ledger_app.post(
        "/deliveries/release", {"case_id": "c", "work_id": "w", "claim": token, "exit_status": 2}
    )
    assert status == 200 and gone["released"] is True and gone["state"] == "in_progress"
    status, _, second = ledger_app.deliver(case_id="c", work_id="w", pod_uid="B", claim_ttl=60)
    assert status == 200 and second["claim"]["taken_over"] is False
    status, _, done = ledger_app.post(
        "/deliveries/complete",
        {"case_id": "c", "work_id": "w", "result": {"n": 1}, "claim": second["claim"]["token"]},
    )
    assert status == 200 and done["state"] == "completed" and done["result"] == {"n": 1}
    status, headers, replay = ledger_app.deliver(case_id="c", work_id="w", pod_uid="C")
    assert status == 200 and headers["Idempotent-Replayed"] == "true"
    assert replay["state"] == "completed" and replay["result"] == {"n": 1}
    _, _, spec = ledger_app.call("GET", "/openapi.json")
    assert {"/deliveries/complete", "/deliveries/release"} <= set(spec["paths"])
    assert "409" in spec["paths"]["/deliveries"]["post"]["responses"]
