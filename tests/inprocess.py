"""A service's real ASGI app, asked without a socket.

The app is the one ``ackledger serve`` runs, on a real database; only uvicorn and the socket
are left out. Every request, from whichever test thread, runs on one event loop of the
client's own, as a served process runs them all on one: group commit gathers concurrent
requests as it would, and the ledger's database calls hop to worker threads as they would.
Bodies are streamed chunk by chunk (httpx's ASGI transport), so a chunked upload reaches the
app as several ``http.request`` messages, as it does through uvicorn.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import ExitStack
from typing import Any

import anyio.from_thread
import httpx
from starlette.types import ASGIApp

#: The media type each POST route of the sink expects (CONTRACT v2 section 6); every other
#: route of the services takes ``application/json``.
SINK_TYPES = {
    "/events": "application/cloudevents+json",
    "/events/batch": "application/cloudevents-batch+json",
}


def content_type(path: str) -> str:
    """The Content-Type a well-behaved client declares for a body sent to ``path``."""
    return SINK_TYPES.get(path.split("?", 1)[0], "application/json")


#: (status, headers with lower-case names, body): what ``http.client`` tests read.
Reply = tuple[int, dict[str, str], bytes]
#: (status, headers, parsed JSON body or the raw bytes), like ``tests.race.Client.call``.
Answer = tuple[int, httpx.Headers, Any]


class InProcess:
    """Requests to ``app`` on an event loop thread of this client's own; ``close`` ends it."""

    def __init__(self, app: ASGIApp) -> None:
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        transport = httpx.ASGITransport(app=app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        self._stack.callback(self._portal.call, self._client.aclose)

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def send(
        self, method: str, path: str, content: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        ask = functools.partial(self._client.request, method, path, headers=headers)
        return self._portal.call(functools.partial(ask, content=content))

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request; a body is of the type its route expects (``content_type``) unless
        ``headers`` say otherwise (the services refuse any other type)."""
        sent = {"Content-Type": content_type(path)} if body is not None else {}
        sent.update(headers or {})
        response = self.send(method, path, body, sent)
        return response.status_code, dict(response.headers.items()), response.content

    def post_chunked(self, path: str, chunks: list[bytes]) -> int:
        """POST a body without a Content-Length, in ``chunks``; the answer's status."""

        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        headers = {"Content-Type": content_type(path)}
        return self.send("POST", path, stream(), headers).status_code

    def call(self, method: str, path: str, body: bytes | None = None) -> Answer:
        headers = {"Content-Type": content_type(path)} if body is not None else {}
        response = self.send(method, path, body, headers)
        data = response.content
        parsed = json.loads(data) if data[:1] in (b"{", b"[") else data
        return response.status_code, response.headers, parsed

    def post(self, path: str, obj: object) -> Answer:
        return self.call("POST", path, json.dumps(obj).encode())

    def deliver(self, **fields: Any) -> Answer:
        """``POST /deliveries`` to a ledger (``pod_uid`` and ``mode`` have defaults)."""
        return self.post("/deliveries", {"pod_uid": "pod", "mode": "idempotent", **fields})
