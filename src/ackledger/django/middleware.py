"""``ackledger.django.IdempotencyMiddleware``: the ``Idempotency-Key`` header for Django views.

The rules are the ASGI middleware's (``ackledger.IdempotencyMiddleware``, CONTRACT §14), run
as they are: each request is handed to it as an ASGI request whose app is the rest of Django's
chain, and what it answers becomes Django's response. Its options come from
``settings.ACKLEDGER["IDEMPOTENCY"]`` (``methods``, ``required``, ``ttl``, ``lease``, and
``scope``: the dotted path of a function of the request returning who asks); the keys live on
ackledger's alias.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Any

from ..ledger.idempotency_middleware import IdempotencyMiddleware as AsgiIdempotency
from .config import idempotency_options
from .target import database_target

_REQUEST = "ackledger.django.request"
#: The request thread's queue of calls: Django runs a view on the thread of its request, and
#: never under a running event loop, so the core's loop runs on a thread of its own and hands
#: the view back to the request's thread.
_CALLS = "ackledger.django.calls"
_DONE = object()


def _request_scope(function: Callable[[Any], str]) -> Callable[[MutableMapping[str, Any]], str]:
    return lambda scope: function(scope[_REQUEST])


#: Every middleware of the process, for ``close_middlewares``.
_instances: weakref.WeakSet[IdempotencyMiddleware] = weakref.WeakSet()


def close_middlewares() -> None:
    """Close the ledger connection each middleware holds; the next request opens it again."""
    for middleware in list(_instances):
        middleware.release()


class IdempotencyMiddleware:
    """A Django middleware (add it to ``MIDDLEWARE``) with the ASGI middleware's semantics."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self._core: AsgiIdempotency | None = None
        self._lock = threading.Lock()
        _instances.add(self)

    def release(self) -> None:
        with self._lock:
            core, self._core = self._core, None
        if core is not None:
            core.close()

    def core(self) -> AsgiIdempotency:
        with self._lock:
            if self._core is None:
                self._core = AsgiIdempotency(
                    self._view, ledger=database_target(), **self._options()
                )
            return self._core

    @staticmethod
    def _options() -> dict[str, Any]:
        from django.utils.module_loading import import_string

        found = idempotency_options()
        scope = found.get("scope")
        if isinstance(scope, str):
            scope = import_string(scope)
        if scope is not None:
            found["scope"] = _request_scope(scope)
        return found

    def __call__(self, request: Any) -> Any:
        core = self.core()
        if "Idempotency-Key" not in request.headers and (
            request.method not in core.methods or not core.required
        ):
            # What the core does with such a request: nothing but run the app. Done here, it
            # costs no thread and no event loop.
            return self.get_response(request)
        messages: list[MutableMapping[str, Any]] = []
        ran: list[Any] = []
        body = request.body
        scope = {
            "type": "http",
            "method": request.method,
            "path": request.path,
            "raw_path": request.get_full_path().split("?", 1)[0].encode("latin-1", "replace"),
            "query_string": request.META.get("QUERY_STRING", "").encode("latin-1", "replace"),
            "headers": [
                (name.lower().encode("latin-1"), str(value).encode("latin-1", "replace"))
                for name, value in request.headers.items()
            ],
            _REQUEST: request,
            _CALLS: queue.SimpleQueue(),
            "state": {"response": ran},
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            messages.append(message)

        _run_beside(core(scope, receive, send), scope)
        response = ran[0] if ran else None
        if response is not None and not getattr(response, "streaming", False):
            # The view's own response object (its cookies and every header): the middleware
            # has stored what a repeat gets.
            return response
        return _from_messages(messages)

    async def _view(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """The rest of Django's chain as the ASGI app the core runs once per key. It runs on
        this thread, as Django's request handling expects; the key's lease is renewed by the
        core's own thread meanwhile."""
        request = scope[_REQUEST]
        response = await _on_request_thread(scope, lambda: self.get_response(request))
        scope["state"]["response"].append(response)
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": headers})  # fmt: skip
        if getattr(response, "streaming", False):
            for chunk in response.streaming_content:
                await send({"type": "http.response.body", "body": bytes(chunk), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.body", "body": response.content, "more_body": False})


def _run_beside(coroutine: Coroutine[Any, Any, None], scope: MutableMapping[str, Any]) -> None:
    """Run ``coroutine`` to its end on a thread of its own while this thread serves the calls
    it hands over (``_on_request_thread``); what it raised is raised here."""
    calls: queue.SimpleQueue[Any] = scope[_CALLS]
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as exc:
            failed.append(exc)
        finally:
            calls.put(_DONE)

    worker = threading.Thread(target=loop, name="ackledger-idempotency", daemon=True)
    worker.start()
    while (call := calls.get()) is not _DONE:
        call()
    worker.join()
    if failed:
        raise failed[0]


async def _on_request_thread(scope: MutableMapping[str, Any], function: Callable[[], Any]) -> Any:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def call() -> None:
        try:
            result = function()
        except BaseException as exc:
            loop.call_soon_threadsafe(future.set_exception, exc)
        else:
            loop.call_soon_threadsafe(future.set_result, result)

    scope[_CALLS].put(call)
    return await future


def _from_messages(messages: list[MutableMapping[str, Any]]) -> Any:
    """Django's response for an answer the core gave without the view (a replay, a refusal),
    or a streamed one."""
    from django.http import HttpResponse

    start = next(message for message in messages if message["type"] == "http.response.start")
    body = b"".join(
        bytes(message.get("body", b"")) for message in messages
        if message["type"] == "http.response.body"
    )  # fmt: skip
    response = HttpResponse(body, status=int(start["status"]))
    for name, value in start.get("headers", []):
        header = bytes(name).decode("latin-1")
        if header.lower() == "content-length":
            continue
        response[header] = bytes(value).decode("latin-1")
    return response
