"""The hot POST routes, and group commit.

Starlette's middleware stack, router and request/response objects cost more per request than
the inbox's own work (docs/benchmarks.md). A ``PostRoute`` makes its answer from the request's
headers and body: the protocol calls it directly (``web.direct``) for a POST on its exact
path; on the ASGI path ``web.observe.Observed`` calls it without the router (and times it
without wrapping ``send``), while Starlette keeps it as a route: a GET on that path still gets
Starlette's 405, and a mounted app is routed as before.

``GroupCommit`` lets requests that are ready in the same turn of the event loop share one
write transaction: each request still gets its own result, and is answered only after the one
commit that made it durable.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from starlette.types import Receive, Scope, Send

from ..errors import InvalidEvent
from .answers import Answer, invalid_answer
from .bodies import MAX_BODY_BYTES, BodyTooLarge, ClientGone, read_body
from .direct import Headers, Outcome, settled

#: A route's answer to its headers and body (None: over the cap, not read).
AnswerMaker = Callable[[Headers, bytes | None], Outcome]


class PostRoute:
    """One POST route, answered on both paths: as a ``DirectRoute`` (``web.direct``) by the
    protocol, and as an ASGI handler (a request the protocol leaves to uvicorn's cycle, or
    an app served by another server), which reads the body and waits for the same answer.

    It is an object, not a function, so that Starlette mounts it as an ASGI app as it is.
    """

    def __init__(self, answer: AnswerMaker, cap: int = MAX_BODY_BYTES) -> None:
        self._answer = answer
        self.cap = cap

    def answer(self, headers: Headers, body: bytes | None, started: float) -> Outcome:
        return self._answer(headers, body)

    async def respond(self, scope: Scope, receive: Receive, send: Send) -> int:
        """Answer the request; returns the status sent (0: the client left, none was)."""
        answer = await self._read_and_answer(scope, receive)
        if answer is None:
            return 0
        await answer.send(send)
        return answer.status

    async def _read_and_answer(self, scope: Scope, receive: Receive) -> Answer | None:
        # The body is read before its Content-Type is judged: the CloudEvents binding's
        # rules need the headers and the body together (``web.cloudevents_http``).
        body: bytes | None
        try:
            body = await read_body(scope, receive, self.cap, check_type=None)
        except BodyTooLarge:
            body = None
        except ClientGone:
            return None
        except InvalidEvent as exc:  # a second Content-Type
            return invalid_answer(str(exc), exc.field)
        return await settled(self._answer(scope["headers"], body))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(scope, receive, send)


Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(Generic[Item, Result]):
    """Gather the items submitted in one turn of the event loop into one ``apply_all`` call.

    ``apply_all(items)`` runs in ONE write transaction and returns one result per item, in
    order. Every request that was ready when the loop got to it has submitted its item by the
    time the flush runs (the flush is scheduled behind them), so N concurrent clients share one
    commit; a lone client pays only two extra turns of the loop. If ``apply_all`` raises,
    nothing was committed and every item of the group gets that exception.
    """

    def __init__(self, apply_all: Callable[[Sequence[Item]], list[Result]]) -> None:
        self._apply_all = apply_all
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        #: The loop the pending flush was scheduled on.
        self._flush_loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, remembered: ``asyncio.get_running_loop`` makes a ``getpid``
        system call each time (CPython 3.11), one per request here. A remembered loop that
        is running in this very thread is the running one (a thread runs one loop at a time,
        and a thread's id is reused only once it has ended, its loop stopped with it)."""
        loop = self._loop
        if loop is None or self._thread != threading.get_ident() or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()
        return loop

    async def submit(self, item: Item) -> Result:
        return await self.enqueue(item)

    def enqueue(self, item: Item) -> asyncio.Future[Result]:
        """``submit`` without a coroutine: the future of the item's result (on the running
        loop; the direct routes, ``web.direct``, answer in its callback)."""
        loop = self._running_loop()
        if self._scheduled and self._flush_loop is not loop:
            # The flush was scheduled on a loop that stopped before running it (a server shut
            # down mid-request): it will never run. Its items' requests were never answered,
            # so they are dropped, not applied (their senders send them again).
            self._waiting = [entry for entry in self._waiting if entry[1].get_loop() is loop]
            self._scheduled = False
        future: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((item, future))
        if not self._scheduled:
            self._scheduled = True
            self._flush_loop = loop
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        try:
            results = self._apply_all([item for item, _ in waiting])
        except Exception as exc:
            for _, future in waiting:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(waiting, results, strict=True):
            if not future.done():
                future.set_result(result)
