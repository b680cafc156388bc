"""The worker's side of the ledger service: ask for the delivery of a business key over HTTP.

Same safety rules as ``send_http``: the URL is checked before any connection (loopback unless
a host is allowed explicitly; the ledger's base URL ``http://HOST:PORT`` or its ``/deliveries``
URL, nothing else), ``http.client`` never reads proxy
variables nor follows redirects, and answers are read up to a cap. Each call is one request
on its own connection: a worker asks once and exits.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

from ..errors import Conflict, InvalidEvent, NotAcknowledged
from ..event import canonical_json
from ..wire.framing import MAX_ANSWER_BYTES
from ..wire.http import request_once
from ..wire.targets import Target, check_target, check_timeout
from ..wire.token import Token
from .ledger import LedgerRequest, check_request
from .outcomes import InFlight, Report, UnknownDelivery

DELIVERIES_PATH = "/deliveries"
#: Listings can be long; they are still read up to a cap.
MAX_LISTING_BYTES = 16 * 1024 * 1024


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
    token: Token | str | None = None,
) -> dict[str, Any]:
    """POST one request; returns the ledger's answer (``delivery_no``, ``duplicate``,
    ``attempt``, ``state``, ``ledger``; ``claim`` when one was asked for and taken). A 409
    raises :class:`InFlight`, a 422 :class:`Conflict`, a 400 :class:`InvalidEvent`, any
    other failure :class:`NotAcknowledged` (or an ``OSError`` for the connection)."""
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
    status, answer = _post(target, DELIVERIES_PATH, body, timeout, token)
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
    token: Token | str | None = None,
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
    return _report(url, "/complete", body, timeout, allowed_hosts=allowed_hosts, token=token)


def release_delivery(
    url: str,
    report: Report,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, Any]:
    """POST ``/deliveries/release``: the claim's work failed with ``report.exit_status``."""
    body: dict[str, Any] = {
        "case_id": report.case_id,
        "work_id": report.work_id,
        "claim": report.claim,
    }
    if report.exit_status is not None:
        body["exit_status"] = report.exit_status
    return _report(url, "/release", body, timeout, allowed_hosts=allowed_hosts, token=token)


def _report(
    url: str,
    action: str,
    body: dict[str, Any],
    timeout: float,
    *,
    allowed_hosts: Iterable[str] | None,
    token: Token | str | None,
) -> dict[str, Any]:
    target = deliveries_target(url, allowed_hosts)
    status, answer = _post(target, DELIVERIES_PATH + action, body, timeout, token)
    if status == 404:
        raise UnknownDelivery(str(answer.get("detail", "")) or None)
    if status != 200:
        _refused(status, answer)
    return answer


def _post(
    target: Target, path: str, body: dict[str, Any], timeout: float, token: Token | str | None
) -> tuple[int, dict[str, Any]]:
    data = canonical_json(body).encode()
    status, answer = request_once(
        target, "POST", path, data, timeout=timeout, cap=MAX_ANSWER_BYTES, token=token
    )
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
    token: Token | str | None = None,
) -> Any:
    """GET ``healthz``, ``deliveries`` or ``attempts`` from the ledger whose ``/deliveries``
    URL (or base URL) is ``url``; returns the parsed JSON."""
    if what not in ("healthz", "deliveries", "attempts"):
        raise ValueError(f"what: must be healthz, deliveries or attempts, got {what!r}")
    target = deliveries_target(url, allowed_hosts)
    path = f"/{what}" + ("" if case_id is None else f"?case_id={quote(case_id, safe='')}")
    status, data = request_once(
        target, "GET", path, None, timeout=timeout, cap=MAX_LISTING_BYTES, token=token
    )
    if status != 200:
        raise NotAcknowledged(f"HTTP {status} for GET {path}", status=status)
    return _json(status, data)


class LedgerClient:
    """A worker's handle on a ledger service: ``request`` asks for the delivery of a business
    key (one HTTP request, as ``ackledger deliver`` makes); ``deliveries``, ``attempts`` and
    ``health`` read what the ledger holds.

    ``url`` is the ledger's base URL (``http://HOST:PORT``) or its ``/deliveries`` URL, checked
    here, before any connection. ``pod_uid`` names this execution in the ledger's attempts:
    by default ``$POD_UID`` (the Kubernetes downward API), else a random UUID for this client.
    """

    def __init__(
        self,
        url: str,
        *,
        pod_uid: str | None = None,
        timeout: float = 5.0,
        allowed_hosts: Iterable[str] | None = None,
    ) -> None:
        self._hosts = None if allowed_hosts is None else tuple(allowed_hosts)
        deliveries_target(url, self._hosts)  # UnsafeTarget now, not at the first request
        self.url = url
        self.timeout = check_timeout(timeout)
        self.pod_uid = (
            pod_uid if pod_uid is not None else os.environ.get("POD_UID") or str(uuid.uuid4())
        )
        check_request("x", "x", self.pod_uid, "idempotent", None)  # InvalidEvent naming pod_uid

    def request(
        self,
        case_id: str,
        work_id: str,
        *,
        mode: str = "idempotent",
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The delivery of ``(case_id, work_id)``: ``{"delivery_no", "duplicate", "attempt",
        "ledger"}``. Bad arguments raise InvalidEvent before any request; the same key with
        another payload raises Conflict; an unreachable or failing ledger OSError or
        NotAcknowledged (worth retrying)."""
        req = check_request(case_id, work_id, self.pod_uid, mode, payload)
        return request_delivery(self.url, req, timeout=self.timeout, allowed_hosts=self._hosts)

    def deliveries(self, case_id: str | None = None) -> Any:
        """The deliveries of one business scope, or every one (``GET /deliveries``)."""
        return self._read("deliveries", case_id)

    def attempts(self, case_id: str | None = None) -> Any:
        """Every request made, by which execution, for one scope or all (``GET /attempts``)."""
        return self._read("attempts", case_id)

    def health(self) -> Any:
        """The ledger's identity (``GET /healthz``: ``pod_uid``, ``boot_id``...)."""
        return self._read("healthz", None)

    def _read(self, what: str, case_id: str | None) -> Any:
        if case_id is not None:
            check_request(case_id, "x", "x", "idempotent", None)  # InvalidEvent naming case_id
        return read_ledger(self.url, what, case_id, timeout=self.timeout, allowed_hosts=self._hosts)
