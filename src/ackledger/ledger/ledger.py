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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.database import Database
from .._core.duration import check_age
from .._core.idempotency import Outcome
from ..errors import Conflict, InvalidEvent
from ..event import check_identifier, fingerprint
from ..store import Tx
from ..store.ledger import PURGE_CHUNK
from .pages import check_page

MODES = ("idempotent", "control")
MAX_KEY_LEN = 128
MAX_POD_UID_LEN = 128
MAX_PAYLOAD_DEPTH = 32
MAX_INT_BITS = 13_288  # 2**13288 has 4,001 digits
#: Keys nobody asked for in this long are forgotten by ``purge()`` (and ``ledger purge``).
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600.0
#: The fields of a request body; ``payload`` is the only optional one over HTTP.
REQUEST_FIELDS = ("case_id", "work_id", "pod_uid", "mode", "payload")
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


def _check_json(value: object, depth: int) -> None:
    """Refuse what JSON cannot carry exactly (so equal payloads always fingerprint equal)."""
    if depth > MAX_PAYLOAD_DEPTH:
        raise InvalidEvent(
            f"payload: nested deeper than {MAX_PAYLOAD_DEPTH} levels", field="payload"
        )
    if type(value) not in _JSON_TYPES:
        # Exact types only: a dict subclass's own items() could hide what json.dumps writes,
        # an int subclass's own comparisons or text differ from the number stored.
        raise InvalidEvent(f"payload: {type(value).__name__} is not a JSON value", field="payload")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        # Python refuses to turn an int of more than 4,300 digits into text, so the
        # fingerprint could not be made; about 4,000 digits is the limit here.
        if value.bit_length() > MAX_INT_BITS:
            raise InvalidEvent(
                "payload: integers longer than about 4,000 digits are not allowed", field="payload"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(
                "payload: numbers must be finite (NaN, infinities and numbers too large for a "
                "double are not JSON values here)",
                field="payload",
            )
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent("payload: strings must be valid Unicode", field="payload") from None
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidEvent("payload: object keys must be strings", field="payload")
            _check_json(key, depth + 1)
            _check_json(item, depth + 1)
    else:
        raise InvalidEvent(f"payload: {type(value).__name__} is not a JSON value", field="payload")


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
    case_id: object, work_id: object, pod_uid: object, mode: object, payload: object
) -> LedgerRequest:
    """Validate one request; raises :class:`InvalidEvent` naming the first bad field."""
    return LedgerRequest(
        case_id=check_identifier(case_id, "case_id", MAX_KEY_LEN),
        work_id=check_identifier(work_id, "work_id", MAX_KEY_LEN),
        pod_uid=check_pod_uid(pod_uid),
        mode=check_mode(mode),
        payload=check_payload(payload),
    )


def request_from_json(obj: object) -> LedgerRequest:
    """A request body: a JSON object with exactly the fields of ``REQUEST_FIELDS``
    (``payload`` optional)."""
    if not isinstance(obj, Mapping):
        raise InvalidEvent(f"body: must be a JSON object, got {type(obj).__name__}", field="body")
    for name in REQUEST_FIELDS[:-1]:
        if name not in obj:
            raise InvalidEvent(f"{name}: missing", field=name)
    extra = sorted(str(key) for key in obj if key not in REQUEST_FIELDS)
    if extra:
        raise InvalidEvent(f"{extra[0]}: unknown field", field=extra[0])
    return check_request(
        obj["case_id"], obj["work_id"], obj["pod_uid"], obj["mode"], obj.get("payload")
    )


@dataclass(frozen=True)
class Recorded:
    outcome: Outcome
    delivery_no: int
    attempt: int


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
    return Recorded(outcome, delivery_no, attempt)


def _answer(req: LedgerRequest, done: Recorded) -> dict[str, Any] | PayloadConflict:
    # A conflict is committed as an attempt (the evidence of the refused request) before it
    # is reported; it created no delivery.
    if done.outcome is Outcome.CONFLICT:
        return PayloadConflict(
            f"key ({req.case_id!r}, {req.work_id!r}) already has delivery "
            f"{done.delivery_no} with another payload; this attempt was refused",
            attempt=done.attempt,
            delivery_no=done.delivery_no,
        )
    return {
        "delivery_no": done.delivery_no,
        "duplicate": done.outcome is Outcome.DUPLICATE,
        "attempt": done.attempt,
    }


class Ledger(Database):
    def request(
        self,
        case_id: str,
        work_id: str,
        pod_uid: str,
        mode: str = "idempotent",
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Hand out the delivery of ``(case_id, work_id)``; returns
        ``{"delivery_no", "duplicate", "attempt"}`` or raises :class:`Conflict`."""
        return self.submit(check_request(case_id, work_id, pod_uid, mode, payload))

    def submit(self, req: LedgerRequest) -> dict[str, Any]:
        """``request`` for an already validated :class:`LedgerRequest`."""
        with self._db.write() as tx:
            done = record_request(tx, req, time.time())
        answer = _answer(req, done)
        if isinstance(answer, PayloadConflict):
            raise answer
        return answer

    def submit_many(self, reqs: Sequence[LedgerRequest]) -> list[dict[str, Any] | PayloadConflict]:
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
            return tx.ledger_deliveries(scope, *page)

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
