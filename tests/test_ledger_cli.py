"""``ackledger deliver`` and ``ackledger ledger purge`` as real processes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ackledger import Ledger
from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows

pytestmark = pytest.mark.slow

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _env(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "POD_UID"}
    return {**env, **extra}


def _deliver(service: Service, *args: str) -> list[str]:
    return ["deliver", "--ledger", service.base_url + "/deliveries", *args]


def test_fail_after_save_exits_75_and_the_retry_gets_the_same_number(
    ledger_service: Service, ledger_db: Path
) -> None:
    key = ["--case-id", "c", "--work-id", "order-1"]
    crashed = run_cli(*_deliver(ledger_service, *key, "--pod-uid", "A", "--fail-after-save"))
    assert crashed.returncode == 75
    assert crashed.stdout == ""
    assert "saved delivery" in crashed.stderr
    saved = raw_rows(ledger_db, "SELECT delivery_no, pod_uid FROM ackledger_attempts")
    assert len(saved) == 1 and saved[0][1] == "A"

    retry = run_cli(*_deliver(ledger_service, *key, "--pod-uid", "B"))
    assert retry.returncode == 0, retry.stderr
    answer = json.loads(retry.stdout)
    assert (answer["delivery_no"], answer["duplicate"], answer["attempt"]) == (saved[0][0], True, 2)
    assert answer["ledger"]["pod_uid"] == "ledger-uid-1"


def test_pod_uid_comes_from_the_environment_else_a_fresh_uuid(
    ledger_service: Service, ledger_db: Path
) -> None:
    key = ["--case-id", "c", "--work-id", "w"]
    assert (
        run_cli(*_deliver(ledger_service, *key), env=_env(POD_UID="from-downward-api")).returncode
        == 0
    )
    assert run_cli(*_deliver(ledger_service, *key), env=_env()).returncode == 0
    assert run_cli(*_deliver(ledger_service, *key), env=_env()).returncode == 0
    pods = [str(row[0]) for row in raw_rows(ledger_db, "SELECT pod_uid FROM ackledger_attempts")]
    assert pods[0] == "from-downward-api"
    assert UUID.fullmatch(pods[1]) and UUID.fullmatch(pods[2]) and pods[1] != pods[2]
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_deliveries") == [(1,)]


def test_control_mode_and_payload_from_the_command_line(
    ledger_service: Service, ledger_db: Path
) -> None:
    control = ["--case-id", "c", "--work-id", "w", "--mode", "control"]
    numbers = {
        json.loads(run_cli(*_deliver(ledger_service, *control)).stdout)["delivery_no"]
        for _ in range(2)
    }
    assert len(numbers) == 2
    key = ["--case-id", "c", "--work-id", "p"]
    first = run_cli(*_deliver(ledger_service, *key, "--payload", '{"qty": 2}'))
    assert first.returncode == 0
    clash = run_cli(*_deliver(ledger_service, *key, "--payload", '{"qty": 3}'))
    assert clash.returncode == 2 and clash.stdout == ""
    assert clash.stderr.count("\n") == 1 and "another payload" in clash.stderr
    assert raw_rows(ledger_db, "SELECT outcome FROM ackledger_attempts WHERE work_id = 'p'") == [
        ("applied",),
        ("conflict",),
    ]


BAD_ARGS = [
    (["--case-id", "bad id", "--work-id", "w"], "--case-id"),
    (["--case-id", "c", "--work-id", ""], "--work-id"),
    (["--case-id", "c", "--work-id", "x" * 129], "--work-id"),
    (["--case-id", "c", "--work-id", "w", "--pod-uid", "pöd"], "--pod-uid"),
    (["--case-id", "c", "--work-id", "w", "--mode", "exactly-once"], "--mode"),
    (["--case-id", "c", "--work-id", "w", "--payload", "[1]"], "--payload"),
    (["--case-id", "c", "--work-id", "w", "--payload", "{oops"], "--payload"),
    (["--case-id", "c", "--work-id", "w", "--timeout", "0"], "--timeout"),
    (["--work-id", "w"], "--case-id"),
]


@pytest.mark.parametrize(("args", "named"), BAD_ARGS)
def test_bad_worker_input_is_one_line_exit_2_and_nothing_is_recorded(
    ledger_service: Service, ledger_db: Path, args: list[str], named: str
) -> None:
    done = run_cli(*_deliver(ledger_service, *args))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("ackledger: error:")
    assert named in done.stderr and "Traceback" not in done.stderr
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(0,)]


@pytest.mark.parametrize(
    "url",
    [
        "http://ledger.invalid/deliveries",
        "https://127.0.0.1/deliveries",
        "http://127.0.0.1:1/events",
        "http://user@127.0.0.1:1/deliveries",
        "http://127.0.0.1:1/deliveries?x=1",
    ],
)
def test_the_ledger_url_is_refused_before_any_connection(url: str) -> None:
    done = run_cli("deliver", "--ledger", url, "--case-id", "c", "--work-id", "w")
    assert done.returncode == 2
    assert done.stderr.startswith("ackledger: error: --ledger: url:")
    assert done.stderr.count("\n") == 1


def test_an_unreachable_ledger_is_exit_4_in_one_line(tmp_path: Path) -> None:
    done = run_cli(
        "deliver", "--ledger", "http://127.0.0.1:1/deliveries", "--case-id", "c", "--work-id", "w"
    )  # fmt: skip
    assert done.returncode == 4 and done.stdout == ""  # 4: unreachable, worth retrying
    assert done.stderr.startswith("ackledger: ledger unavailable:")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("age", ["7", "0d", "-1d", "1y", "d", "1.d", "nan"])
def test_purge_refuses_a_bad_duration_and_deletes_nothing(ledger_db: Path, age: str) -> None:
    with Ledger(ledger_db) as ledger:
        ledger.request("c", "w", "pod")
    done = run_cli("ledger", "purge", "--db", str(ledger_db), "--older-than", age)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--older-than" in done.stderr
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_deliveries") == [(1,)]


def test_purge_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    done = run_cli("ledger", "purge", "--db", str(missing), "--older-than", "1d")
    assert done.returncode == 2 and "--db" in done.stderr
    assert not missing.exists()


def test_serve_ledger_refuses_bad_options(tmp_path: Path) -> None:
    for args in (["--synchronous", "OFF"], ["--port", "70000"]):
        done = run_cli("serve", "ledger", "--db", str(tmp_path / "l.db"), *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert not (tmp_path / "l.db").exists()
