"""The worker's side of the ledger service: ask for the delivery of a business key over HTTP.

Same safety rules as ``send_http``: the URL is checked before any connection (loopback unless
a host is allowed explicitly, path exactly ``/deliveries``), ``http.client`` never reads proxy
variables nor follows redirects, and answers are read up to a cap. Each call is one request
on its own connection: a worker asks once and exits.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from .errors import Conflict, InvalidEvent, NotAcknowledged
from .event import canonical_json
from .ledger import LedgerRequest
from .transport import MAX_ANSWER_BYTES, Target, check_target

DELIVERIES_PATH = "/deliveries"
#: Listings can be long; they are still read up to a cap.
MAX_LISTING_BYTES = 16 * 1024 * 1024


def _exchange(
    target: Target, method: str, path: str, body: bytes | None, *, timeout: float, cap: int
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    try:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(cap + 1)
    except http.client.HTTPException as exc:
        raise NotAcknowledged(f"malformed HTTP answer: {type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    if len(data) > cap:
        raise NotAcknowledged(f"answer body over {cap} bytes; not read further", status=0)
    return response.status, data


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
    ``attempt``, ``ledger``). A 422 raises :class:`Conflict`, a 400 :class:`InvalidEvent`,
    any other failure :class:`NotAcknowledged` (or an ``OSError`` for the connection)."""
    target = check_target(url, DELIVERIES_PATH, allowed_hosts)
    body: dict[str, Any] = {
        "case_id": req.case_id,
        "work_id": req.work_id,
        "pod_uid": req.pod_uid,
        "mode": req.mode,
    }
    if req.payload is not None:
        body["payload"] = req.payload
    status, data = _exchange(
        target,
        "POST",
        DELIVERIES_PATH,
        canonical_json(body).encode(),
        timeout=timeout,
        cap=MAX_ANSWER_BYTES,
    )
    answer = _json(status, data)
    detail = str(answer.get("detail", "")) if isinstance(answer, dict) else ""
    if status == 422:
        raise Conflict(detail or None)
    if status == 400:
        field = answer.get("field") if isinstance(answer, dict) else None
        raise InvalidEvent(detail or None, field=field if isinstance(field, str) else None)
    if status not in (200, 201):
        raise NotAcknowledged(f"HTTP {status} from the ledger: {detail[:200]}", status=status)
    if not isinstance(answer, dict) or not isinstance(answer.get("delivery_no"), int):
        raise NotAcknowledged("the ledger's answer has no delivery_no", status=status)
    return answer


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
    status, data = _exchange(target, "GET", path, None, timeout=timeout, cap=MAX_LISTING_BYTES)
    if status != 200:
        raise NotAcknowledged(f"HTTP {status} for GET {path}", status=status)
    return _json(status, data)
