"""The idempotency ledger: one delivery number per business key, however often a job re-runs.

An execution (a Pod, a process, its random UUID) is not the work. The work is the business key
``(case_id, work_id)``; the memory of what was done with it lives here, outside the worker, and
is looked up and written in one write transaction. Every request leaves an attempt row with the
``pod_uid`` that sent it, so deduplicating the effect never hides a retry.

``control`` mode is the comparison group: every request makes a new delivery, which is what a
worker without a ledger does when a Job re-runs it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._core.canonical import canonical_json, fingerprint
from .._core.duration import check_age
from .._core.idempotency import Outcome
from .._core.identifier import check_identifier
from ..errors import Conflict, InvalidEvent
from ..store import Tx
from ..store.database import Database
from ..store.idempotency_keys import PURGE_CHUNK as KEYS_PURGE_CHUNK
from ..store.idempotency_keys import count_keys, purge_expired_keys
from ..store.ledger import OUTCOME_COLUMNS, PURGE_CHUNK
from .idempotent import idempotent as _idempotent
from .key_outcomes import KeyOutcomes
from .outcomes import (
    ClaimRefused,
    ClaimTaken,
    InFlight,
    Report,
    check_claim_ttl,
    check_exit_status,
    check_token,
    claim_work,
    complete_work,
    parse_result,
    release_work,
    state_of,
)
from .pages import check_page

F = TypeVar("F", bound=Callable[..., Any])
_OUTCOMES_MADE = threading.Lock()
MODES = ("idempotent", "control")
MAX_KEY_LEN = 128
MAX_POD_UID_LEN = 128
MAX_PAYLOAD_DEPTH = 32
MAX_INT_BITS = 13_288  # 2**13288 has 4,001 digits
#: Keys nobody asked for in this long are forgotten by ``purge()`` (and ``ledger purge``).
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600.0
#: The fields of a request body; the last two are optional over HTTP.
REQUEST_FIELDS = ("case_id", "work_id", "pod_uid", "mode", "payload", "claim_ttl")
REQUIRED_FIELDS = REQUEST_FIELDS[:4]
#: The fields of ``POST /deliveries/complete`` and ``/deliveries/release`` (the first two
#: required; a release requires ``claim`` too).
COMPLETE_FIELDS = ("case_id", "work_id", "result", "pod_uid", "claim")
RELEASE_FIELDS = ("case_id", "work_id", "claim", "exit_status")
COUNTER_PREFIX = "ledger."
COUNTER_NAMES = ("attempts", "deliveries", "duplicates", "conflicts")
NO_PAYLOAD_FINGERPRINT = fingerprint(None)


class PayloadConflict(Conflict):
    """This business key is already recorded with another payload."""

    def __init__(self, message: str, *, attempt: int, delivery_no: int) -> None:
        super().__init__(message)
        #: The attempt number this refused request was recorded under.
        self.attempt = attempt
        #: The delivery the key already has (not handed out to this request).
        self.delivery_no = delivery_no


@dataclass(frozen=True)
class LedgerRequest:
    case_id: str
    work_id: str
    pod_uid: str
    mode: str
    payload: dict[str, Any] | None
    #: Ask for a claim on the work: refused (InFlight) while another is younger than this.
    claim_ttl: float | None = None

    @property
    def fingerprint(self) -> str:
        # A missing payload fingerprints as JSON null, so it differs from an empty object; most
        # requests have none, and hashing the same "null" on every request is wasted time.
        return NO_PAYLOAD_FINGERPRINT if self.payload is None else fingerprint(self.payload)


def check_pod_uid(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(
            f"pod_uid: must be a string, got {type(value).__name__}", field="pod_uid"
        )
    if not 1 <= len(value) <= MAX_POD_UID_LEN:
        raise InvalidEvent(
            f"pod_uid: must be 1-{MAX_POD_UID_LEN} characters, got {len(value)}", field="pod_uid"
        )
    # Printable ASCII, " " to "~" (isprintable refuses the control characters and DEL).
    if not (value.isascii() and value.isprintable()):
        raise InvalidEvent("pod_uid: only printable ASCII characters are allowed", field="pod_uid")
    return value


def check_mode(value: object) -> str:
    if not isinstance(value, str) or value not in MODES:
        raise InvalidEvent(f"mode: must be 'idempotent' or 'control', got {value!r}", field="mode")
    return value


_JSON_TYPES = frozenset({type(None), bool, int, float, str, list, dict})


def _check_json(value: object, depth: int, name: str = "payload") -> None:
    """Refuse what JSON cannot carry exactly (so equal payloads always fingerprint equal)."""
    if depth > MAX_PAYLOAD_DEPTH:
        raise InvalidEvent(f"{name}: nested deeper than {MAX_PAYLOAD_DEPTH} levels", field=name)
    if type(value) not in _JSON_TYPES:
        # Exact types only: a dict subclass's own items() could hide what json.dumps writes,
        # an int subclass's own comparisons or text differ from the number stored.
        raise InvalidEvent(f"{name}: {type(value).__name__} is not a JSON value", field=name)
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        # Python refuses to turn an int of more than 4,300 digits into text, so the
        # fingerprint could not be made; about 4,000 digits is the limit here.
        if value.bit_length() > MAX_INT_BITS:
            raise InvalidEvent(
                f"{name}: integers longer than about 4,000 digits are not allowed", field=name
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(
                f"{name}: numbers must be finite (NaN, infinities and numbers too large for a "
                "double are not JSON values here)",
                field=name,
            )
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent(f"{name}: strings must be valid Unicode", field=name) from None
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1, name)
    elif isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidEvent(f"{name}: object keys must be strings", field=name)
            _check_json(key, depth + 1, name)
            _check_json(item, depth + 1, name)
    else:
        raise InvalidEvent(f"{name}: {type(value).__name__} is not a JSON value", field=name)


def check_json_value(value: object, name: str) -> object:
    """Any JSON value that fingerprints and stores exactly (a completed work's result)."""
    _check_json(value, 1, name)
    return value


def check_payload(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if type(value) is not dict:
        raise InvalidEvent(
            f"payload: must be a JSON object or null, got {type(value).__name__}", field="payload"
        )
    _check_json(value, 1)
    return dict(value)


def check_request(
    case_id: object,
    work_id: object,
    pod_uid: object,
    mode: object,
    payload: object,
    *,
    claim_ttl: object = None,
) -> LedgerRequest:
    """Validate one request; raises :class:`InvalidEvent` naming the first bad field."""
    return LedgerRequest(
        case_id=check_identifier(case_id, "case_id", MAX_KEY_LEN),
        work_id=check_identifier(work_id, "work_id", MAX_KEY_LEN),
        pod_uid=check_pod_uid(pod_uid),
        mode=check_mode(mode),
        payload=check_payload(payload),
        claim_ttl=check_claim_ttl(claim_ttl),
    )


def check_report(
    case_id: object,
    work_id: object,
    *,
    claim: object = None,
    pod_uid: object = None,
    result: object = None,
    exit_status: object = None,
) -> Report:
    """Validate a ``complete`` or a ``release``; raises :class:`InvalidEvent` naming the field."""
    return Report(
        case_id=check_identifier(case_id, "case_id", MAX_KEY_LEN),
        work_id=check_identifier(work_id, "work_id", MAX_KEY_LEN),
        claim=None if claim is None else check_token(claim),
        pod_uid=None if pod_uid is None else check_pod_uid(pod_uid),
        result=None if result is None else canonical_json(check_json_value(result, "result")),
        exit_status=check_exit_status(exit_status),
    )


def _body_fields(
    obj: object, fields: tuple[str, ...], required: tuple[str, ...]
) -> Mapping[str, Any]:
    """A JSON object body with every ``required`` field and no field outside ``fields``."""
    if not isinstance(obj, Mapping):
        raise InvalidEvent(f"body: must be a JSON object, got {type(obj).__name__}", field="body")
    for name in required:
        if name not in obj:
            raise InvalidEvent(f"{name}: missing", field=name)
    extra = sorted(str(key) for key in obj if key not in fields)
    if extra:
        raise InvalidEvent(f"{extra[0]}: unknown field", field=extra[0])
    return obj


def complete_from_json(obj: object) -> Report:
    """A ``POST /deliveries/complete`` body."""
    body = _body_fields(obj, COMPLETE_FIELDS, COMPLETE_FIELDS[:2])
    return check_report(
        body["case_id"],
        body["work_id"],
        claim=body.get("claim"),
        pod_uid=body.get("pod_uid"),
        result=body.get("result"),
    )


def release_from_json(obj: object) -> Report:
    """A ``POST /deliveries/release`` body."""
    body = _body_fields(obj, RELEASE_FIELDS, RELEASE_FIELDS[:3])
    status = body.get("exit_status")
    if type(status) is float and status.is_integer():
        # JSON's 3.0 is the number 3 (JSON Schema's "integer" takes it); Python callers
        # of ``Ledger.release`` still pass an int.
        status = int(status)
    return check_report(body["case_id"], body["work_id"], claim=body["claim"], exit_status=status)


def request_from_json(obj: object) -> LedgerRequest:
    """A request body: a JSON object with the fields of ``REQUEST_FIELDS`` (``payload`` and
    ``claim_ttl`` optional)."""
    body = _body_fields(obj, REQUEST_FIELDS, REQUIRED_FIELDS)
    return check_request(
        body["case_id"],
        body["work_id"],
        body["pod_uid"],
        body["mode"],
        body.get("payload"),
        claim_ttl=body.get("claim_ttl"),
    )


@dataclass(frozen=True)
class Recorded:
    outcome: Outcome
    delivery_no: int
    attempt: int
    #: ``state_of`` the delivery (empty for a conflict).
    state: dict[str, Any] = field(default_factory=dict)
    claim: ClaimTaken | ClaimRefused | None = None


def record_request(tx: Tx, req: LedgerRequest, now: float) -> Recorded:
    """The whole request inside the caller's write transaction: effect once, attempt always.

    The requests for a key, and a purge of it, take turns from before the claim to their
    commit: the attempt number counts the key's earlier attempts, and the delivery the claim
    finds is still there when the attempt refers to it (see ``Tx.ledger_record``).
    """
    outcome, delivery_no, attempt = tx.ledger_record(
        case_id=req.case_id,
        work_id=req.work_id,
        pod_uid=req.pod_uid,
        mode=req.mode,
        fingerprint=req.fingerprint,
        now=now,
    )
    if outcome is Outcome.CONFLICT:
        return Recorded(outcome, delivery_no, attempt)
    # A new delivery is in progress with no claim: no need to read it back.
    found = NEW_DELIVERY if outcome is Outcome.APPLIED else tx.ledger_outcome(delivery_no)
    claim = None
    if req.claim_ttl is not None:
        claim = claim_work(
            tx,
            case_id=req.case_id,
            work_id=req.work_id,
            pod_uid=req.pod_uid,
            delivery_no=delivery_no,
            outcome=found,
            claim_ttl=req.claim_ttl,
            now=now,
        )
    return Recorded(outcome, delivery_no, attempt, state_of(found), claim)


#: ``OUTCOME_COLUMNS`` of a delivery just created.
NEW_DELIVERY: dict[str, Any] = dict.fromkeys(OUTCOME_COLUMNS) | {"state": "in_progress"}
Refusal = PayloadConflict | InFlight


def _answer(req: LedgerRequest, done: Recorded) -> dict[str, Any] | Refusal:
    # A conflict is committed as an attempt (the evidence of the refused request) before it
    # is reported; it created no delivery.
    if done.outcome is Outcome.CONFLICT:
        return PayloadConflict(
            f"key ({req.case_id!r}, {req.work_id!r}) already has delivery "
            f"{done.delivery_no} with another payload; this attempt was refused",
            attempt=done.attempt,
            delivery_no=done.delivery_no,
        )
    if isinstance(done.claim, ClaimRefused):
        return InFlight(
            f"key ({req.case_id!r}, {req.work_id!r}): delivery {done.delivery_no} is claimed by "
            f"{done.claim.claimed_by!r} since {done.claim.age:.1f} s, less than claim_ttl "
            f"{req.claim_ttl:g} s; this attempt was refused",
            attempt=done.attempt,
            delivery_no=done.delivery_no,
            claimed_by=done.claim.claimed_by,
            age=done.claim.age,
            claim_ttl=float(req.claim_ttl or 0.0),
        )
    answer = {
        "delivery_no": done.delivery_no,
        "duplicate": done.outcome is Outcome.DUPLICATE,
        "attempt": done.attempt,
        **done.state,
    }
    if isinstance(done.claim, ClaimTaken):
        answer["claim"] = done.claim.answer()
    return answer


class Ledger(Database):
    @property
    def key_outcomes(self) -> KeyOutcomes:
        """What this process's idempotency keys did: both faces count here, the ledger's
        ``/metrics`` serves it (``ackledger_idempotency_*``)."""
        with _OUTCOMES_MADE:  # one object, whichever thread asks first
            found: KeyOutcomes | None = self.__dict__.get("_key_outcomes")
            if found is None:
                found = self.__dict__["_key_outcomes"] = KeyOutcomes()
        return found

    def idempotent(
        self,
        key: Callable[..., object],
        *,
        using_arg: str | None = None,
        ttl: float | str = "24h",
        wait: float | str = 0,
        lease: float | str = "30s",
    ) -> Callable[[F], F]:
        """Decorate a function (plain or ``async def``) so that it runs once per idempotency
        key: ``key`` gets the call's arguments and returns the key (1-255 characters). A
        repeat with the same key and arguments returns the stored JSON result without running
        it; other arguments raise :class:`Conflict`; a call while another holds the key raises
        :class:`ackledger.InFlight`, or waits up to ``wait`` seconds for it. An exception
        releases the key and stores nothing. ``using_arg`` names the parameter that holds the
        caller's connection or session: the key and its result are then written with it, in
        the caller's transaction. Keys expire after ``ttl``; ``lease`` is how long a holder
        that stopped renewing (its process died) keeps the key. See docs/idempotency.md."""
        return _idempotent(
            self._db, key, using_arg=using_arg, ttl=ttl, wait=wait, lease=lease,
            outcomes=self.key_outcomes,
        )  # fmt: skip

    def request(
        self,
        case_id: str,
        work_id: str,
        pod_uid: str,
        mode: str = "idempotent",
        payload: dict[str, Any] | None = None,
        *,
        claim_ttl: float | None = None,
    ) -> dict[str, Any]:
        """Hand out the delivery of ``(case_id, work_id)``; returns
        ``{"delivery_no", "duplicate", "attempt", "state"}`` (and ``"result"`` once completed)
        or raises :class:`Conflict`. With ``claim_ttl`` it also claims the work (the answer's
        ``claim``), unless the work is completed, and raises :class:`InFlight` if another
        claim younger than ``claim_ttl`` seconds holds it."""
        return self.submit(
            check_request(case_id, work_id, pod_uid, mode, payload, claim_ttl=claim_ttl)
        )

    def submit(self, req: LedgerRequest) -> dict[str, Any]:
        """``request`` for an already validated :class:`LedgerRequest`."""
        with self._db.write() as tx:
            done = record_request(tx, req, time.time())
        answer = _answer(req, done)
        if isinstance(answer, Conflict):
            raise answer
        return answer

    def complete(
        self,
        case_id: str,
        work_id: str,
        result: object = None,
        *,
        pod_uid: str | None = None,
        claim: str | None = None,
    ) -> dict[str, Any]:
        """Record that the work of the key's delivery finished, with an optional JSON
        ``result`` (``claim``: the delivery a claim was handed out for, in any mode). The first
        completion wins: completing it again changes nothing and answers the stored result
        with ``"duplicate": true``. Raises :class:`UnknownDelivery` if there is none."""
        report = check_report(case_id, work_id, claim=claim, pod_uid=pod_uid, result=result)
        return self.report_complete(report)

    def report_complete(self, report: Report) -> dict[str, Any]:
        """``complete`` for an already validated :class:`Report`."""
        with self._db.write() as tx:
            return complete_work(tx, report, time.time())

    def release(
        self, case_id: str, work_id: str, claim: str, *, exit_status: int | None = None
    ) -> dict[str, Any]:
        """Give back a claim whose work failed (recording its ``exit_status``): the delivery
        stays in progress and the next claim takes it at once. ``"released": false`` if the
        claim had already been taken over or given back."""
        if claim is None:
            raise InvalidEvent("claim: missing", field="claim")
        report = check_report(case_id, work_id, claim=claim, exit_status=exit_status)
        return self.report_release(report)

    def report_release(self, report: Report) -> dict[str, Any]:
        """``release`` for an already validated :class:`Report` (with a claim)."""
        with self._db.write() as tx:
            return release_work(tx, report)

    def submit_many(self, reqs: Sequence[LedgerRequest]) -> list[dict[str, Any] | Refusal]:
        """Several requests in ONE write transaction, in order, each with its own answer (a
        conflict is returned, not raised). For a single-writer database this is group commit:
        one durable commit for every request that was ready at the same time."""
        now = time.time()
        with self._db.write() as tx:
            # Every key's turn first, in one order for all callers.
            tx.ledger_lock_keys((req.case_id, req.work_id) for req in reqs)
            done = [record_request(tx, req, now) for req in reqs]
        return [_answer(req, each) for req, each in zip(reqs, done, strict=True)]

    def deliveries(
        self, case_id: str | None = None, *, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Deliveries in number order, all or those of one case; a page of at most ``limit``
        with ``delivery_no`` over ``after`` when given."""
        scope = None if case_id is None else check_identifier(case_id, "case_id", MAX_KEY_LEN)
        page = check_page(after, limit)
        with self._db.read() as tx:
            rows = tx.ledger_deliveries(scope, *page)
        for row in rows:
            row["result"] = parse_result(row["result"])
        return rows

    def attempts(
        self, case_id: str | None = None, *, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Attempts in arrival order, all or those of one case; a page of at most ``limit``
        with ``attempt_no`` over ``after`` when given."""
        scope = None if case_id is None else check_identifier(case_id, "case_id", MAX_KEY_LEN)
        page = check_page(after, limit)
        with self._db.read() as tx:
            return tx.ledger_attempts(scope, *page)

    def counters(self) -> dict[str, int]:
        """Durable totals that only grow: attempts, deliveries, duplicates, conflicts."""
        with self._db.read() as tx:
            found = tx.counters_read(COUNTER_PREFIX)
        return {name: found.get(name, 0) for name in COUNTER_NAMES}

    def purge(self, older_than_seconds: float = DEFAULT_RETENTION_SECONDS) -> dict[str, int]:
        """Forget every key with no request in the last ``older_than_seconds``.

        A purged key starts fresh: its next request gets a new delivery number and attempt 1.
        Returns how many deliveries and attempts were removed.
        """
        cutoff = time.time() - check_age(older_than_seconds, "older_than_seconds")
        # Each chunk of keys is its own transaction: on PostgreSQL it holds its keys' locks
        # (requests for them wait) only until it commits, on SQLite the one writer's lock; a
        # large purge never holds up a key, or the file, for long, and what it has done is
        # kept if it stops half-way.
        deliveries = attempts = 0
        after: tuple[str, str] | None = ("", "")
        while after is not None:
            with self._db.write() as tx:
                gone_deliveries, gone_attempts, after = tx.ledger_purge_idle_chunk(
                    cutoff, after, PURGE_CHUNK
                )
            deliveries += gone_deliveries
            attempts += gone_attempts
        return {"deliveries": deliveries, "attempts": attempts}

    def purge_keys(self) -> int:
        """Forget every idempotency key (of ``idempotent`` functions and the
        ``IdempotencyMiddleware``) past its ttl, except one a live holder still runs; returns
        how many went. Expired keys are already ignored by claims: this only frees the space."""
        removed = 0
        while True:
            # A chunk per transaction, as ``purge``: no key, nor SQLite's file, is held long.
            with self._db.write() as tx:
                gone = purge_expired_keys(tx, time.time(), KEYS_PURGE_CHUNK)
            removed += gone
            if gone < KEYS_PURGE_CHUNK:
                return removed

    def key_counts(self) -> dict[str, int]:
        """How many idempotency keys are ``in_progress`` and ``completed`` (expired ones
        included until ``purge_keys``)."""
        with self._db.read() as tx:
            return count_keys(tx)
