"""One request to a real service process over a loopback socket, read with ``http.client``."""

from __future__ import annotations

import http.client

from ackledger.ops.processes import Service

#: The Content-Type each of the sink's routes takes (CONTRACT v2 section 6).
ROUTE_TYPES = {
    "/events": "application/cloudevents+json",
    "/events/batch": "application/cloudevents-batch+json",
}


def content_type(path: str) -> str:
    """The type a body posted to ``path`` is declared as by default."""
    return ROUTE_TYPES.get(path.split("?", 1)[0], "application/json")


def request(
    service: Service,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    # A body is declared as its route takes it unless a test says otherwise (the services
    # refuse any other type): structured CloudEvents at the sink, JSON elsewhere.
    sent = {"Content-Type": content_type(path)} if body is not None else {}
    sent.update(headers or {})
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
