"""The worker's side of the ledger service: ask for the delivery of a business key over HTTP.

Same safety rules as ``send_http``: the URL is checked before any connection (loopback unless
a host is allowed explicitly, path exactly ``/deliveries``), ``http.client`` never reads proxy
variables nor follows redirects, and answers are read up to a cap. Each call is one request
on its own connection: a worker asks once and exits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..errors import Conflict, InvalidEvent, NotAcknowledged
from ..event import canonical_json
from ..wire.framing import MAX_ANSWER_BYTES
from ..wire.http import request_once
from ..wire.targets import check_target
from ..wire.token import Token
from .ledger import LedgerRequest

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
    token: Token | str | None = None,
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
    status, data = request_once(
        target,
        "POST",
        DELIVERIES_PATH,
        canonical_json(body).encode(),
        timeout=timeout,
        cap=MAX_ANSWER_BYTES,
        token=token,
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
    token: Token | str | None = None,
) -> Any:
    """GET ``healthz``, ``deliveries`` or ``attempts`` from the ledger whose ``/deliveries``
    URL is ``url``; returns the parsed JSON."""
    if what not in ("healthz", "deliveries", "attempts"):
        raise ValueError(f"what: must be healthz, deliveries or attempts, got {what!r}")
    target = check_target(url, DELIVERIES_PATH, allowed_hosts)
    path = f"/{what}" + ("" if case_id is None else f"?case_id={quote(case_id, safe='')}")
    status, data = request_once(
        target, "GET", path, None, timeout=timeout, cap=MAX_LISTING_BYTES, token=token
    )
    if status != 200:
        raise NotAcknowledged(f"HTTP {status} for GET {path}", status=status)
    return _json(status, data)
