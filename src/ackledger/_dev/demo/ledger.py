"""Demo chapter of the idempotency ledger (seed 002): the memory of the work is outside the Pod.

Every worker here is a new process, as every Pod a Job creates is new: nothing it knew survives
it. Only the ledger, in its own process, remembers the business key.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from ...ledger.client import read_ledger
from ..procs import run_cli, start_service
from .story import Story

CASE = "seed-002"
CONTROL_CASE = "seed-002-control"
FAIL_AFTER_SAVE = 75


def _worker(
    url: str,
    case_id: str,
    work_id: str,
    pod_uid: str | None,
    *,
    mode: str = "idempotent",
    payload: dict[str, Any] | None = None,
    fail_after_save: bool = False,
) -> subprocess.CompletedProcess[str]:
    """One worker Pod: ``ackledger deliver`` in a new process, without POD_UID unless given."""
    args = ["deliver", "--ledger", url, "--case-id", case_id, "--work-id", work_id]
    args += ["--mode", mode]
    if pod_uid is not None:
        args += ["--pod-uid", pod_uid]
    if payload is not None:
        args += ["--payload", json.dumps(payload)]
    if fail_after_save:
        args.append("--fail-after-save")
    env = {name: value for name, value in os.environ.items() if name != "POD_UID"}
    return run_cli(*args, env=env)


def _answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "(nothing)"


def _show_attempts(story: Story, rows: list[dict[str, Any]]) -> None:
    story.say(f"{'#':>3}  {'work_id':<11} {'pod_uid':<38} {'outcome':<10} delivery_no")
    for row in rows:
        story.say(
            f"{row['attempt_no']:>3}  {row['work_id']:<11} {row['pod_uid']:<38} "
            f"{row['outcome']:<10} {row['delivery_no']}"
        )


def job_reruns(story: Story, workdir: Path) -> None:
    story.chapter(
        "A Job re-runs its worker in a new Pod",
        """A worker that makes a random UUID at start-up, or writes "done" into its own Pod,
        forgets everything when the Job retries it in a new Pod. The execution (pod_uid) is not
        the work (case_id, work_id): the ledger, in its own process, remembers the work and
        checks and writes it in one transaction.""",
    )
    with start_service(
        ["serve", "ledger", "--db", str(workdir / "ledger.db"), "--port", "0"],
        stderr_path=workdir / "ledger.log",
    ) as service:
        url = service.base_url + "/deliveries"
        before = read_ledger(url, "healthz")
        story.step("Start the ledger as its own process (its own 'Pod') and read /healthz.")
        story.say(f"ledger pod_uid={before['pod_uid']} boot_id={before['boot_id']}")

        story.step("Pod A asks for order-1001; the ledger saves; the worker dies with 75.")
        pod_a = _worker(url, CASE, "order-1001", "pod-A", fail_after_save=True)
        story.check(
            "worker A exited 75 after the save, without reporting success",
            pod_a.returncode == FAIL_AFTER_SAVE and not pod_a.stdout.strip(),
            f"exit {pod_a.returncode}, stderr: {_first_line(pod_a.stderr)}",
        )
        saved = read_ledger(url, "attempts", CASE)
        first_no = saved[0]["delivery_no"] if saved else None
        story.check(
            "the ledger kept what the dead worker cannot remember",
            len(saved) == 1 and saved[0]["pod_uid"] == "pod-A" and first_no is not None,
            f"attempts: {[(row['pod_uid'], row['outcome'], row['delivery_no']) for row in saved]}",
        )

        story.step("The Job retries in a new Pod B with the same business key.")
        pod_b = _answer(_worker(url, CASE, "order-1001", "pod-B"))
        story.check(
            "pod B gets the same delivery number, marked as a duplicate",
            pod_b.get("delivery_no") == first_no and pod_b.get("duplicate") is True,
            f"answer {pod_b}",
        )

        story.step("An operator runs a new Job (another name); its worker makes a random UUID.")
        rerun = _answer(_worker(url, CASE, "order-1001", None))
        story.check(
            "a fresh execution id does not make fresh work: same delivery number",
            rerun.get("delivery_no") == first_no and rerun.get("duplicate") is True,
            f"answer {rerun}",
        )

        story.step("Another order, order-1002, from pod D.")
        other = _answer(_worker(url, CASE, "order-1002", "pod-D"))
        story.check(
            "another work_id gets a new delivery number (different work is not merged)",
            isinstance(other.get("delivery_no"), int)
            and other.get("delivery_no") != first_no
            and other.get("duplicate") is False,
            f"answer {other}",
        )
        story.say("Numbers are unique, not consecutive: a claim that found its key taken")
        story.say("still used up a sequence value, as PostgreSQL sequences do.")

        story.step("Pod E sends order-1001 with a payload the key was not created with.")
        clash = _worker(url, CASE, "order-1001", "pod-E", payload={"qty": 2})
        story.check(
            "the ledger refuses it (422 -> exit 2) and hands out no delivery",
            clash.returncode == 2 and not clash.stdout.strip(),
            f"exit {clash.returncode}, stderr: {_first_line(clash.stderr)}",
        )

        story.step("Read the evidence: every attempt, and the deliveries.")
        rows = read_ledger(url, "attempts", CASE)
        _show_attempts(story, rows)
        seen = [(row["work_id"], row["outcome"]) for row in rows]
        story.check(
            "attempts show pods A, B, the random UUID, D and E, with their outcomes",
            [row["pod_uid"] for row in rows][:2] == ["pod-A", "pod-B"]
            and len({row["pod_uid"] for row in rows}) == 5
            and seen
            == [
                ("order-1001", "applied"),
                ("order-1001", "duplicate"),
                ("order-1001", "duplicate"),
                ("order-1002", "applied"),
                ("order-1001", "conflict"),
            ],
            f"{len(rows)} attempts: {seen}",
        )
        delivered = [
            (row["work_id"], row["delivery_no"]) for row in read_ledger(url, "deliveries", CASE)
        ]
        story.check(
            "deliveries: exactly one per business key",
            delivered == [("order-1001", first_no), ("order-1002", other.get("delivery_no"))],
            f"deliveries {delivered}",
        )

        story.step("The control group: the same story without the ledger's key check.")
        _worker(url, CONTROL_CASE, "order-1001", "pod-A", mode="control", fail_after_save=True)
        _worker(url, CONTROL_CASE, "order-1001", "pod-B", mode="control")
        control = [
            (row["work_id"], row["delivery_no"])
            for row in read_ledger(url, "deliveries", CONTROL_CASE)
        ]
        story.check(
            "control mode delivered the one order twice (the problem the ledger removes)",
            len(control) == 2 and len({no for _, no in control}) == 2,
            f"deliveries {control}",
        )

        after = read_ledger(url, "healthz")
        story.step("Read /healthz again: was it the same ledger all along?")
        same = (after["pod_uid"], after["boot_id"]) == (before["pod_uid"], before["boot_id"])
        story.check(
            "the ledger's pod_uid and boot_id did not change during the story",
            same,
            f"before {before['pod_uid']}/{before['boot_id']}, "
            f"after {after['pod_uid']}/{after['boot_id']}"
            + ("" if same else " - another ledger answered: the evidence above is void"),
        )
    story.say("The ledger protects one row insert inside its own database; the courier, the")
    story.say("mail server or another database are not part of its transaction.")
