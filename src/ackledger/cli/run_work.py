"""``deliver --run CMD``: do the work behind a delivery at most once to completion.

The request took a claim (or found the work completed). The work runs only for a delivery
that is not completed; its exit status decides what the ledger learns: 0 completes the
delivery (a new Pod for the same key then learns it is done and runs nothing), anything else
releases the claim so the Job's next Pod can take the work at once. A Pod that dies while
CMD runs reports nothing: its claim expires after ``--claim-ttl`` and is taken over.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from ..errors import NotAcknowledged
from ..ledger.ledger import LedgerRequest, check_report

#: A claim lasts this long unless ``--claim-ttl`` says otherwise (CONTRACT §10).
DEFAULT_CLAIM_TTL = 300.0
#: ``--run``'s CMD is one string for this shell (``-c``), as cron and ``sh -c`` run it.
SHELL = "/bin/sh"
#: The shell's statuses for a command it could not run.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
#: The ledger did not record the outcome (or could not be reached): worth a retry.
EXIT_UNRECORDED = 1


def _say(text: str) -> None:
    print(f"ackledger deliver: {text}", file=sys.stderr)


def _run(command: list[str], env: dict[str, str]) -> int:
    """CMD's exit status as the shell reports it (128 + N for a signal). Its output goes to
    stderr: deliver's stdout carries only the ledger's answer, one JSON object."""
    try:
        done = subprocess.run(command, env=env, stdout=sys.stderr.fileno(), check=False)
    except OSError as exc:
        _say(f"--run: cannot start {command[0]} ({exc.strerror})")
        return EXIT_NOT_EXECUTABLE
    if done.returncode < 0:
        return 128 + int(signal.Signals(-done.returncode))
    if done.returncode == EXIT_NOT_FOUND:
        _say(f"--run: command not found (the shell's exit {EXIT_NOT_FOUND})")
    elif done.returncode == EXIT_NOT_EXECUTABLE:
        _say(f"--run: command not executable (the shell's exit {EXIT_NOT_EXECUTABLE})")
    return done.returncode


def run_work(
    args: argparse.Namespace, req: LedgerRequest, answer: dict[str, Any], command: list[str]
) -> int:
    from ..ledger.client import complete_delivery, release_delivery

    if answer.get("state") == "completed":
        _say(
            f"delivery {answer['delivery_no']} was completed by "
            f"{answer.get('completed_by') or 'an earlier run'}; not running the work again"
        )
        print(json.dumps(answer | {"ran": False}))
        return 0
    claim = answer.get("claim")
    token = claim.get("token") if isinstance(claim, dict) else None
    if not isinstance(token, str):
        # A control-mode delivery is new every time, so it always has a claim; an answer
        # without one is not the ledger this worker speaks to.
        _say("the ledger's answer has neither a completed state nor a claim")
        return EXIT_UNRECORDED
    env = os.environ | {
        "ACKLEDGER_DELIVERY_NO": str(answer["delivery_no"]),
        "ACKLEDGER_ATTEMPT": str(answer.get("attempt")),
        "ACKLEDGER_CASE_ID": req.case_id,
        "ACKLEDGER_WORK_ID": req.work_id,
    }
    started = time.monotonic()
    status = _run(command, env)
    seconds = round(time.monotonic() - started, 3)
    from .exposure import token_of

    client = {"timeout": args.timeout, "allowed_hosts": args.allow_host, "token": token_of(args)}
    try:
        if status == 0:
            result = {"exit_status": 0, "pod_uid": req.pod_uid, "seconds": seconds}
            report = check_report(
                req.case_id, req.work_id, claim=token, pod_uid=req.pod_uid, result=result
            )
            done = complete_delivery(args.ledger, report, **client)
            shown = {key: value for key, value in answer.items() if key != "claim"}
            print(json.dumps(shown | done | {"duplicate": answer.get("duplicate"), "ran": True}))
            return 0
        report = check_report(req.case_id, req.work_id, claim=token, exit_status=status)
        release_delivery(args.ledger, report, **client)
    except (OSError, NotAcknowledged) as exc:
        what = "finished" if status == 0 else f"failed (exit {status})"
        _say(f"the work {what}, but the ledger did not record it: {exc}")
        return status or EXIT_UNRECORDED
    _say(
        f"the work failed (exit {status}); delivery {answer['delivery_no']} stays in progress "
        "and its claim was released"
    )
    return status
