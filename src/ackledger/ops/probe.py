"""Read-only looks at running services for operators: a sink's receipt, a service's metrics.

The same target rules as sending apply (loopback unless a host is allowed explicitly, no
proxies, no redirects, capped reads); a service is named by its base URL,
``http://HOST:PORT`` (a trailing ``/metrics``, or the service's own route, ``/events`` of a
sink or ``/deliveries`` of a ledger, is accepted too).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from typing import Any

from .._core.identifier import check_identifier
from ..errors import NotAcknowledged
from ..wire.http import request_once
from ..wire.targets import ANY_PATH, Target, base_url, check_target
from ..wire.token import Token

MAX_READ_BYTES = 1024 * 1024


def _target(url: str, path: str, allowed_hosts: Iterable[str] | None) -> Target:
    # The base keeps a mounted sink's prefix; base_url already refused any other path.
    return check_target(base_url(url) + path, ANY_PATH, allowed_hosts)


def http_get(
    url: str,
    path: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> tuple[int, bytes]:
    """GET ``path`` from the service at ``url``: (status, body); connection errors raise.
    A query in ``path`` (built by the caller, e.g. a receipt's ``source``) is sent as given;
    the target rules judge the path without it."""
    route, mark, query = path.partition("?")
    target = _target(url, route, allowed_hosts)
    return request_once(
        target, "GET", target.path + mark + query, timeout=timeout, cap=MAX_READ_BYTES, token=token
    )


def sink_receipt(
    url: str,
    event_id: str,
    *,
    source: str | None = None,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, Any] | None:
    """The sink service's inbox receipt of one event (``GET /events/{id}``, of ``source``
    when given), or None on 404."""
    check_identifier(event_id, "event_id", 128)  # also makes the id safe as a path segment
    path = f"/events/{event_id}"
    if source is not None:
        path += "?" + urllib.parse.urlencode({"source": source})
    status, body = http_get(url, path, timeout=timeout, allowed_hosts=allowed_hosts, token=token)
    if status == 404:
        return None
    if status != 200:
        raise NotAcknowledged(f"GET /events/{event_id} answered HTTP {status}", status=status)
    try:
        receipt = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise NotAcknowledged("receipt is not valid JSON", status=status) from None
    if not isinstance(receipt, dict):
        raise NotAcknowledged("receipt is not a JSON object", status=status)
    return receipt


def scrape(
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, float]:
    """The unlabelled samples of a service's ``/metrics`` (and those labelled only
    ``scope="database"``, the figures read from its database), counters without ``_total``."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = http_get(
        url, "/metrics", timeout=timeout, allowed_hosts=allowed_hosts, token=token
    )
    if status != 200:
        raise NotAcknowledged(f"GET /metrics answered HTTP {status}", status=status)
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
        for sample in family.samples:
            own_labels = sample.labels and sample.labels != {"scope": "database"}
            if own_labels or sample.name.endswith("_created"):
                continue
            name = sample.name.removesuffix("_total")
            found[name] = float(sample.value)
    return found
