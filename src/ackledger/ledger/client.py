"""The worker's side of the ledger service: ask for the delivery of a business key over HTTP.

Same safety rules as ``send_http``: the URL is checked before any connection (loopback unless
a host is allowed explicitly, path exactly ``/deliveries``), ``http.client`` never reads proxy
variables nor follows redirects, and answers are read up to a cap. Each call is one request
on its own connection: a worker asks once and exits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NoReturn
from urllib.parse import quote

from ..errors import Conflict, InvalidEvent, NotAcknowledged
from ..event import canonical_json
from ..wire.framing import MAX_ANSWER_BYTES
from ..wire.http import request_once
from ..wire.targets import Target, check_target
from .ledger import LedgerRequest
from .outcomes import InFlight, Report, UnknownDelivery

DELIVERIES_PATH = "/deliveries"
#: Listings can be long; they are still read up to a cap.
MAX_LISTING_BYTES = 16 * 1024 * 1024


def _json(status: int, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise NotAcknowledged(f"HTTP {status} answer is not valid JSON", status=status) from None


def request_delivery(
    url: str,
    req: LedgerRequest,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> dict[str, Any]:
    """POST one request; returns the ledger's answer (``delivery_no``, ``duplicate``,
    ``attempt``, ``state``, ``ledger``; ``claim`` when one was asked for and taken). A 409
    raises :class:`InFlight`, a 422 :class:`Conflict`, a 400 :class:`InvalidEvent`, any
    other failure :class:`NotAcknowledged` (or an ``OSError`` for the connection)."""
    target = check_target(url, DELIVERIES_PATH, allowed_hosts)
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
    status, answer = _post(target, DELIVERIES_PATH, body, timeout)
    if status == 409:
        raise _in_flight(answer, req.claim_ttl)
    if status not in (200, 201):
        _refused(status, answer)
    return answer


def complete_delivery(
    url: str,
    report: Report,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> dict[str, Any]:
    """POST ``/deliveries/complete``: the work of a key (or of a claim's delivery) finished.
    Returns the delivery's state and result; a 404 raises :class:`UnknownDelivery`."""
    body: dict[str, Any] = {"case_id": report.case_id, "work_id": report.work_id}
    if report.result is not None:
        body["result"] = json.loads(report.result)
    if report.pod_uid is not None:
        body["pod_uid"] = report.pod_uid
    if report.claim is not None:
        body["claim"] = report.claim
    return _report(url, "/complete", body, timeout, allowed_hosts)


def release_delivery(
    url: str,
    report: Report,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> dict[str, Any]:
    """POST ``/deliveries/release``: the claim's work failed with ``report.exit_status``."""
    body: dict[str, Any] = {
        "case_id": report.case_id,
        "work_id": report.work_id,
        "claim": report.claim,
    }
    if report.exit_status is not None:
        body["exit_status"] = report.exit_status
    return _report(url, "/release", body, timeout, allowed_hosts)


def _report(
    url: str,
    action: str,
    body: dict[str, Any],
    timeout: float,
    allowed_hosts: Iterable[str] | None,
) -> dict[str, Any]:
    target = check_target(url, DELIVERIES_PATH, allowed_hosts)
    status, answer = _post(target, DELIVERIES_PATH + action, body, timeout)
    if status == 404:
        raise UnknownDelivery(str(answer.get("detail", "")) or None)
    if status != 200:
        _refused(status, answer)
    return answer


def _post(
    target: Target, path: str, body: dict[str, Any], timeout: float
) -> tuple[int, dict[str, Any]]:
    data = canonical_json(body).encode()
    status, answer = request_once(target, "POST", path, data, timeout=timeout, cap=MAX_ANSWER_BYTES)
    found = _json(status, answer)
    if not isinstance(found, dict):
        raise NotAcknowledged(f"HTTP {status} answer is not a JSON object", status=status)
    if status in (200, 201) and not isinstance(found.get("delivery_no"), int):
        raise NotAcknowledged("the ledger's answer has no delivery_no", status=status)
    return status, found


def _refused(status: int, answer: dict[str, Any]) -> NoReturn:
    detail = str(answer.get("detail", ""))
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
        str(answer.get("detail", "")) or "the key is in flight",
        attempt=int(number("attempt")),
        delivery_no=int(number("delivery_no")),
        claimed_by=str(answer.get("claimed_by", "")),
        age=number("claim_age_s"),
        claim_ttl=claim_ttl or 0.0,
    )


def read_ledger(
    url: str,
    what: str,
    case_id: str | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> Any:
    """GET ``healthz``, ``deliveries`` or ``attempts`` from the ledger whose ``/deliveries``
    URL is ``url``; returns the parsed JSON."""
    if what not in ("healthz", "deliveries", "attempts"):
        raise ValueError(f"what: must be healthz, deliveries or attempts, got {what!r}")
    target = check_target(url, DELIVERIES_PATH, allowed_hosts)
    path = f"/{what}" + ("" if case_id is None else f"?case_id={quote(case_id, safe='')}")
    status, data = request_once(target, "GET", path, None, timeout=timeout, cap=MAX_LISTING_BYTES)
    if status != 200:
        raise NotAcknowledged(f"HTTP {status} for GET {path}", status=status)
    return _json(status, data)
