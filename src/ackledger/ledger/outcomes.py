"""Ledger outcomes: did the work behind a delivery finish, and who is doing it right now?

A delivery number alone cannot tell a retry whether the Pod before it did the work or died
first. So a delivery also has a ``state`` (``in_progress`` until someone reports the work
finished, then ``completed`` with its ``result``), and a worker that is about to do the work
may take a **claim** on it. A claim is live while it is younger than the ``claim_ttl`` of the
request that finds it: that request is refused (409, "in flight") so that two Pods never run
the same work at once; an older claim belongs to a Pod that died and is taken over.

Everything here runs inside the request's write transaction, which holds the key's turn.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from .._core.duration import check_age
from ..errors import AckledgerError, Conflict, InvalidEvent
from ..errors import InFlight as KeyInFlight
from ..store import Tx

STATES = ("in_progress", "completed")
#: The longest claim a request may ask for (a day): a Pod that died holds its key this long.
MAX_CLAIM_TTL = 86400.0
#: A claim token: 32 lowercase hex digits (``secrets.token_hex(16)``).
TOKEN_LEN = 32
MAX_EXIT_STATUS = 255


class InFlight(KeyInFlight, Conflict):
    """This business key is claimed by an execution that may still be doing its work."""

    def __init__(
        self,
        message: str,
        *,
        attempt: int,
        delivery_no: int,
        claimed_by: str,
        age: float,
        claim_ttl: float,
    ) -> None:
        super().__init__(message)
        self.attempt = attempt
        self.delivery_no = delivery_no
        #: The pod_uid that holds the claim.
        self.claimed_by = claimed_by
        #: Seconds since the claim was taken, and the age at which it could be taken over.
        self.age = age
        self.claim_ttl = claim_ttl

    @property
    def retry_after(self) -> float:
        """Seconds until a request with the same ``claim_ttl`` would take the claim over."""
        return max(0.0, self.claim_ttl - self.age)


class UnknownDelivery(AckledgerError, LookupError):
    """No delivery for this business key (or this claim): nothing was completed or released."""


def check_claim_ttl(value: object) -> float | None:
    if value is None:
        return None
    try:
        ttl = check_age(value, "claim_ttl")
    except ValueError as exc:
        raise InvalidEvent(str(exc), field="claim_ttl") from None
    if ttl > MAX_CLAIM_TTL:
        raise InvalidEvent(
            f"claim_ttl: at most {MAX_CLAIM_TTL:.0f} seconds, got {value!r}", field="claim_ttl"
        )
    return ttl


def check_token(value: object) -> str:
    if not (
        isinstance(value, str)
        and len(value) == TOKEN_LEN
        and all(char in "0123456789abcdef" for char in value)
    ):
        raise InvalidEvent(
            f"claim: must be the {TOKEN_LEN} hex digits of a claim the ledger handed out",
            field="claim",
        )
    return value


def check_exit_status(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEvent(
            f"exit_status: must be a whole number, got {value!r}", field="exit_status"
        )
    if not -MAX_EXIT_STATUS <= value <= MAX_EXIT_STATUS:
        raise InvalidEvent(
            f"exit_status: must be from -{MAX_EXIT_STATUS} to {MAX_EXIT_STATUS}, got {value}",
            field="exit_status",
        )
    return value


@dataclass(frozen=True)
class Report:
    """A ``complete`` (``exit_status`` 0) or a ``release`` of one key, validated."""

    case_id: str
    work_id: str
    claim: str | None
    pod_uid: str | None
    #: The result as canonical JSON text; None when no result was given.
    result: str | None
    exit_status: int | None


def parse_result(stored: object) -> Any:
    return None if stored is None else json.loads(str(stored))


def state_of(outcome: dict[str, Any]) -> dict[str, Any]:
    """What an answer says about the work: its state, and the result once completed."""
    if outcome["state"] == "completed":
        return {
            "state": "completed",
            "result": parse_result(outcome["result"]),
            "completed_at": outcome["completed_at"],
            "completed_by": outcome["completed_by"],
        }
    return {"state": "in_progress"}


@dataclass(frozen=True)
class ClaimTaken:
    token: str
    taken_over: bool
    claim_ttl: float

    def answer(self) -> dict[str, Any]:
        return {"token": self.token, "taken_over": self.taken_over, "ttl": self.claim_ttl}


@dataclass(frozen=True)
class ClaimRefused:
    claimed_by: str
    age: float


def claim_work(
    tx: Tx,
    *,
    case_id: str,
    work_id: str,
    pod_uid: str,
    delivery_no: int,
    outcome: dict[str, Any],
    claim_ttl: float,
    now: float,
) -> ClaimTaken | ClaimRefused | None:
    """Take the claim of a delivery for the request just recorded (the key's newest attempt),
    unless the work is completed (None) or a live claim holds it (refused)."""
    if outcome["state"] == "completed":
        return None
    held_since = outcome["claimed_at"]
    if held_since is not None:
        age = max(0.0, now - float(held_since))
        if age < claim_ttl:
            tx.ledger_note_claim(case_id, work_id, "in_flight", None)
            return ClaimRefused(str(outcome["claimed_by"]), age)
    token = secrets.token_hex(TOKEN_LEN // 2)
    tx.ledger_take_claim(delivery_no, token, pod_uid, now)
    taken_over = held_since is not None
    tx.ledger_note_claim(case_id, work_id, "taken_over" if taken_over else "claimed", token)
    return ClaimTaken(token, taken_over, claim_ttl)


def complete_work(tx: Tx, report: Report, now: float) -> dict[str, Any]:
    """Record the work of a key (or of a claim's delivery) as finished. The first report
    wins: a key that is already completed keeps its result and is answered with it."""
    delivery_no = _find(tx, report)
    completed = tx.ledger_complete(delivery_no, report.result, report.pod_uid, now)
    if report.claim is not None:
        tx.ledger_exit_status(report.case_id, report.work_id, report.claim, 0)
    answer = {"delivery_no": delivery_no, **state_of(tx.ledger_outcome(delivery_no))}
    return answer | {"duplicate": not completed}


def release_work(tx: Tx, report: Report) -> dict[str, Any]:
    """Give a claim back (its work failed), recording the claimer's exit status; the work stays
    in progress and the next request takes it at once."""
    if report.claim is None:  # pragma: no cover - check_report for a release requires it
        raise InvalidEvent("claim: missing", field="claim")
    delivery_no = _find(tx, report)
    released = tx.ledger_release(delivery_no, report.claim)
    if report.exit_status is not None:
        tx.ledger_exit_status(report.case_id, report.work_id, report.claim, report.exit_status)
    answer = {"delivery_no": delivery_no, **state_of(tx.ledger_outcome(delivery_no))}
    return answer | {"released": released}


def _find(tx: Tx, report: Report) -> int:
    tx.ledger_lock_keys([(report.case_id, report.work_id)])
    delivery_no = tx.ledger_key_delivery(report.case_id, report.work_id, report.claim)
    if delivery_no is None:
        what = "no idempotent delivery" if report.claim is None else "no delivery with this claim"
        raise UnknownDelivery(f"key ({report.case_id!r}, {report.work_id!r}) has {what}")
    return delivery_no
