"""The ledger service's protocol as values: what each call sends, and what its answer means.

A :class:`Call` is built from checked input (the target is checked against the allow-list
here, before any connection; a bad argument raises before anything is sent) and carries
the function that turns ``(status, body)`` into the call's result or its error. Nothing here
does I/O: ``transport.send`` and ``transport.send_async`` carry a call over a blocking socket
or an asyncio stream, so ``LedgerClient``, ``AsyncLedgerClient`` and ``ackledger deliver``
share one source of truth for the requests and the answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar
from urllib.parse import quote, urlsplit

from .._core.canonical import canonical_json
from ..errors import Conflict, InvalidEvent, NotAcknowledged
from ..wire.framing import MAX_ANSWER_BYTES
from ..wire.targets import Target, check_target
from ..wire.token import Token
from .http_message import request_bytes
from .ledger import LedgerRequest
from .outcomes import InFlight, Report, UnknownDelivery

DELIVERIES_PATH = "/deliveries"
#: Listings can be long; they are still read up to a cap.
MAX_LISTING_BYTES = 16 * 1024 * 1024
READABLE = ("healthz", "deliveries", "attempts")

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to the ledger and the reading of its answer."""

    target: Target
    method: str
    path: str
    body: bytes | None
    #: The most answer-body bytes read.
    cap: int
    #: ``(status, body)`` to the call's result, or the error the answer means.
    finish: Callable[[int, bytes], T]

    def request(self, token: Token | str | None) -> bytes:
        return request_bytes(self.target, self.method, self.path, self.body, token)


def deliveries_target(url: object, allowed_hosts: Iterable[str] | None = None) -> Target:
    """The ledger named by ``url``, its base URL or its ``/deliveries`` URL (the same two forms
    everywhere a ledger is named); UnsafeTarget for anything else, before any connection."""
    if isinstance(url, str) and "?" not in url and "#" not in url:
        try:
            path = urlsplit(url).path
        except ValueError:
            path = None  # check_target says what is wrong with it
        if path in ("", "/"):
            url = url.rstrip("/") + DELIVERIES_PATH
    return check_target(url, DELIVERIES_PATH, allowed_hosts)


def delivery_call(
    url: str, req: LedgerRequest, allowed_hosts: Iterable[str] | None
) -> Call[dict[str, Any]]:
    """``POST /deliveries``: the answer's ``delivery_no``, ``duplicate``, ``attempt``,
    ``state``, ``ledger`` (and ``claim`` when one was asked for and taken). A 409 raises
    :class:`InFlight`, a 422 :class:`Conflict`, a 400 :class:`InvalidEvent`, any other
    failure :class:`NotAcknowledged`."""
    target = deliveries_target(url, allowed_hosts)
    body: dict[str, Any] = {
        "case_id": req.case_id,
        "work_id": req.work_id,
        "pod_uid": req.pod_uid,
        "mode": req.mode,
    }
    if req.payload is not None:
        body["payload"] = req.payload
    if req.claim_ttl is not None:
        body["claim_ttl"] = req.claim_ttl
    finish = _finisher((200, 201), 409, lambda answer: _in_flight(answer, req.claim_ttl))
    return _post(target, DELIVERIES_PATH, body, finish)


def report_call(
    url: str, action: str, report: Report, allowed_hosts: Iterable[str] | None
) -> Call[dict[str, Any]]:
    """``POST /deliveries/complete`` or ``/deliveries/release`` of a checked report: the
    delivery's state (and result); a 404 raises :class:`UnknownDelivery`."""
    if action not in ("complete", "release"):
        raise ValueError(f"action: must be complete or release, got {action!r}")
    target = deliveries_target(url, allowed_hosts)
    body: dict[str, Any] = {"case_id": report.case_id, "work_id": report.work_id}
    if action == "complete":
        if report.result is not None:
            body["result"] = json.loads(report.result)
        if report.pod_uid is not None:
            body["pod_uid"] = report.pod_uid
        if report.claim is not None:
            body["claim"] = report.claim
    else:
        body["claim"] = report.claim
        if report.exit_status is not None:
            body["exit_status"] = report.exit_status
    finish = _finisher((200,), 404, lambda answer: UnknownDelivery(_detail(answer) or None))
    return _post(target, f"{DELIVERIES_PATH}/{action}", body, finish)


def read_call(
    url: str, what: str, case_id: str | None, allowed_hosts: Iterable[str] | None
) -> Call[Any]:
    """``GET /healthz``, ``/deliveries`` or ``/attempts`` (of one scope): the parsed JSON."""
    if what not in READABLE:
        raise ValueError(f"what: must be healthz, deliveries or attempts, got {what!r}")
    target = deliveries_target(url, allowed_hosts)
    path = f"/{what}" + ("" if case_id is None else f"?case_id={quote(case_id, safe='')}")

    def finish(status: int, data: bytes) -> Any:
        if status != 200:
            raise NotAcknowledged(f"HTTP {status} for GET {path}", status=status)
        return _json(status, data)

    return Call(target, "GET", path, None, MAX_LISTING_BYTES, finish)


def _post(
    target: Target,
    path: str,
    body: dict[str, Any],
    finish: Callable[[int, bytes], dict[str, Any]],
) -> Call[dict[str, Any]]:
    data = canonical_json(body).encode()
    return Call(target, "POST", path, data, MAX_ANSWER_BYTES, finish)


def _finisher(
    ok: tuple[int, ...], status_of_error: int, error: Callable[[dict[str, Any]], Exception]
) -> Callable[[int, bytes], dict[str, Any]]:
    """The reading of a POST's answer: a JSON object; ``error`` for ``status_of_error``, the
    common refusals for any other status outside ``ok``."""

    def finish(status: int, data: bytes) -> dict[str, Any]:
        answer = _answer_object(status, data)
        if status == status_of_error:
            raise error(answer)
        if status not in ok:
            _refused(status, answer)
        return answer

    return finish


def _detail(answer: dict[str, Any]) -> str:
    return str(answer.get("detail", ""))


def _json(status: int, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise NotAcknowledged(f"HTTP {status} answer is not valid JSON", status=status) from None


def _answer_object(status: int, data: bytes) -> dict[str, Any]:
    found = _json(status, data)
    if not isinstance(found, dict):
        raise NotAcknowledged(f"HTTP {status} answer is not a JSON object", status=status)
    if status in (200, 201) and not isinstance(found.get("delivery_no"), int):
        raise NotAcknowledged("the ledger's answer has no delivery_no", status=status)
    return found


def _refused(status: int, answer: dict[str, Any]) -> NoReturn:
    detail = _detail(answer)
    if status == 422:
        raise Conflict(detail or None)
    if status == 400:
        field = answer.get("field")
        raise InvalidEvent(detail or None, field=field if isinstance(field, str) else None)
    raise NotAcknowledged(f"HTTP {status} from the ledger: {detail[:200]}", status=status)


def _in_flight(answer: dict[str, Any], claim_ttl: float | None) -> InFlight:
    def number(name: str) -> float:
        value = answer.get(name)
        return float(value) if isinstance(value, (int, float)) else 0.0

    return InFlight(
        _detail(answer) or "the key is in flight",
        attempt=int(number("attempt")),
        delivery_no=int(number("delivery_no")),
        claimed_by=str(answer.get("claimed_by", "")),
        age=number("claim_age_s"),
        claim_ttl=claim_ttl or 0.0,
    )
