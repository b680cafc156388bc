"""Demo chapter of the idempotency ledger (seed 002): the memory of the work is outside the Pod.

Every worker here is a new process, as every Pod a Job creates is new: nothing it knew survives
it. Only the ledger, in its own process, remembers the business key, and whether the work
behind its delivery was completed: a retry learns if the Pod before it finished or died first.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...ledger.client import read_ledger
from ...ops.processes import run_cli, start_service
from .story import Story

CASE = "seed-002"
CONTROL_CASE = "seed-002-control"
FAIL_AFTER_SAVE = 75
#: The workers' claim TTL: short, so that the story can wait out a dead Pod's claim.
CLAIM_TTL_S = 4.0
#: What the 409 of a live claim makes ``deliver --run`` exit with.
IN_FLIGHT_EXIT = 1


def _worker(
    url: str,
    case_id: str,
    work_id: str,
    pod_uid: str | None,
    *,
    mode: str = "idempotent",
    payload: dict[str, Any] | None = None,
    fail_after_save: bool = False,
    run: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """One worker Pod: ``ackledger deliver`` in a new process, without POD_UID unless given."""
    args = ["deliver", "--ledger", url, "--case-id", case_id, "--work-id", work_id]
    args += ["--mode", mode]
    if run is not None:
        args += ["--run", run, "--claim-ttl", f"{CLAIM_TTL_S:g}"]
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
    story.say(
        f"{'#':>3}  {'work_id':<11} {'pod_uid':<38} {'outcome':<10} {'claim':<11} exit delivery_no"
    )
    for row in rows:
        exit_status = "-" if row["exit_status"] is None else row["exit_status"]
        story.say(
            f"{row['attempt_no']:>3}  {row['work_id']:<11} {row['pod_uid']:<38} "
            f"{row['outcome']:<10} {row['claim'] or '-':<11} {exit_status!s:<4} "
            f"{row['delivery_no']}"
        )


def _work_command(effects: Path) -> str:
    """The work a Job's Pod does (``deliver --run``): one line appended to ``effects`` per run,
    so the story can count how often the work really happened."""
    code = (
        "import os, sys; open(sys.argv[1], 'a').write("
        "os.environ['ACKLEDGER_DELIVERY_NO'] + chr(10))"
    )
    return shlex.join([sys.executable, "-c", code, str(effects)])


def _runs(effects: Path) -> int:
    return len(effects.read_text().splitlines()) if effects.exists() else 0


def job_reruns(story: Story, workdir: Path) -> None:
    story.chapter(
        "A Job re-runs its worker in a new Pod",
        """A worker that makes a random UUID at start-up, or writes "done" into its own Pod,
        forgets everything when the Job retries it in a new Pod. The execution (pod_uid) is not
        the work (case_id, work_id): the ledger, in its own process, remembers the work and
        checks and writes it in one transaction. It also learns whether the work was completed:
        a retry runs the work only if nobody finished it, and never while a live Pod holds it.""",
    )
    effects = workdir / "order-1001.effects"
    work = _work_command(effects)
    with start_service(
        ["serve", "ledger", "--db", str(workdir / "ledger.db"), "--port", "0"],
        stderr_path=workdir / "ledger.log",
    ) as service:
        url = service.base_url + "/deliveries"
        before = read_ledger(url, "healthz")
        story.step("Start the ledger as its own process (its own 'Pod') and read /healthz.")
        story.say(f"ledger pod_uid={before['pod_uid']} boot_id={before['boot_id']}")

        story.step(
            "Pod A runs order-1001 (deliver --run); the ledger saves its claim; A dies with 75 "
            "before doing the work."
        )
        pod_a = _worker(url, CASE, "order-1001", "pod-A", fail_after_save=True, run=work)
        a_died = time.monotonic()
        story.check(
            "worker A exited 75 after the save, without reporting success or doing the work",
            pod_a.returncode == FAIL_AFTER_SAVE and not pod_a.stdout.strip() and not _runs(effects),
            f"exit {pod_a.returncode}, work done {_runs(effects)} time(s), stderr: "
            f"{_first_line(pod_a.stderr)}",
        )
        saved = read_ledger(url, "attempts", CASE)
        first_no = saved[0]["delivery_no"] if saved else None
        story.check(
            "the ledger kept what the dead worker cannot remember",
            len(saved) == 1 and saved[0]["pod_uid"] == "pod-A" and first_no is not None,
            f"attempts: {[(row['pod_uid'], row['outcome'], row['delivery_no']) for row in saved]}",
        )

        story.step("The Job retries at once in a new Pod B, while A's claim is still live.")
        pod_b = _worker(url, CASE, "order-1001", "pod-B", run=work)
        story.check(
            "pod B is answered 409 in flight (exit 1) and does not run the work beside A",
            pod_b.returncode == IN_FLIGHT_EXIT
            and "in flight" in pod_b.stderr
            and not _runs(effects),
            f"exit {pod_b.returncode}, stderr: {_first_line(pod_b.stderr)}",
        )

        story.say(f"(the Job backs off; A's claim grows older than --claim-ttl {CLAIM_TTL_S:g}s)")
        time.sleep(max(0.0, CLAIM_TTL_S + 0.3 - (time.monotonic() - a_died)))
        story.step("The Job retries in Pod C with the same business key; A's claim has expired.")
        pod_c = _answer(_worker(url, CASE, "order-1001", "pod-C", run=work))
        story.check(
            "pod C gets the same delivery number, learns the work was never completed, takes "
            "the dead Pod's claim over and does the work once",
            pod_c.get("delivery_no") == first_no
            and pod_c.get("duplicate") is True
            and pod_c.get("ran") is True
            and pod_c.get("state") == "completed"
            and _runs(effects) == 1,
            f"answer {pod_c}, work done {_runs(effects)} time(s)",
        )

        story.step("An operator runs a new Job (another name); its worker makes a random UUID.")
        rerun = _answer(_worker(url, CASE, "order-1001", None, run=work))
        story.check(
            "a fresh execution id does not make fresh work: same delivery number, and the new "
            "Job learns the work was completed (by pod C), so it runs nothing",
            rerun.get("delivery_no") == first_no
            and rerun.get("duplicate") is True
            and rerun.get("state") == "completed"
            and rerun.get("completed_by") == "pod-C"
            and rerun.get("ran") is False
            and _runs(effects) == 1,
            f"answer {rerun}, work done {_runs(effects)} time(s)",
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
        seen = [(row["work_id"], row["outcome"], row["claim"]) for row in rows]
        story.check(
            "attempts show pods A, B, C, the random UUID, D and E, with their outcomes and "
            "what each did with the claim",
            [row["pod_uid"] for row in rows][:3] == ["pod-A", "pod-B", "pod-C"]
            and len({row["pod_uid"] for row in rows}) == 6
            and seen
            == [
                ("order-1001", "applied", "claimed"),
                ("order-1001", "duplicate", "in_flight"),
                ("order-1001", "duplicate", "taken_over"),
                ("order-1001", "duplicate", None),
                ("order-1002", "applied", None),
                ("order-1001", "conflict", None),
            ],
            f"{len(rows)} attempts: {seen}",
        )
        delivered = [
            (row["work_id"], row["delivery_no"], row["state"])
            for row in read_ledger(url, "deliveries", CASE)
        ]
        story.check(
            "deliveries: exactly one per business key, order-1001 completed, and its work done "
            "once although five Pods asked",
            delivered
            == [
                ("order-1001", first_no, "completed"),
                ("order-1002", other.get("delivery_no"), "in_progress"),
            ]
            and _runs(effects) == 1,
            f"deliveries {delivered}, order-1001's work done {_runs(effects)} time(s)",
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
