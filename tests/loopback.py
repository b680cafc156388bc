"""One request to a real service process over a loopback socket, read with ``http.client``."""

from __future__ import annotations

import http.client

from ackledger._dev.procs import Service


def request(
    service: Service,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    # A body is JSON unless a test says otherwise (the services refuse any other type).
    sent = {"Content-Type": "application/json"} if body is not None else {}
    sent.update(headers or {})
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
