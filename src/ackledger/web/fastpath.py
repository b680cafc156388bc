"""The hot POST routes, and group commit.

Starlette's middleware stack, router and request/response objects cost more per request than
the inbox's own work (docs/benchmarks.md). A ``PostRoute`` is a plain ASGI handler that makes
its answer from the request's headers and body: ``web.observe.Observed`` calls it without the
router (and times it without wrapping ``send``), while Starlette keeps it as a route: a GET on
that path still gets Starlette's 405, and a mounted app is routed as before.

``GroupCommit`` lets requests that are ready in the same turn of the event loop share one
write transaction: each request still gets its own result, and is answered only after the one
commit that made it durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from starlette.types import Receive, Scope, Send

from ..errors import InvalidEvent
from .answers import Answer, invalid_answer
from .bodies import MAX_BODY_BYTES, BodyTooLarge, ClientGone, read_body
from .cloudevents_http import Headers

#: A route's answer to its headers and body (None: over the cap, not read).
AnswerMaker = Callable[[Headers, bytes | None], Awaitable[Answer]]


class PostRoute:
    """One POST route as a plain ASGI handler: it reads the body (up to ``cap`` bytes) and
    sends the answer ``answer(headers, body)`` makes.

    It is an object, not a function, so that Starlette mounts it as an ASGI app as it is.
    """

    def __init__(self, answer: AnswerMaker, cap: int = MAX_BODY_BYTES) -> None:
        self.answer = answer
        self.cap = cap

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
        return await self.answer(scope["headers"], body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(scope, receive, send)


Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(Generic[Item, Result]):
    """Gather the items submitted in one turn of the event loop into one ``apply_all`` call.

    ``apply_all(items)`` runs in ONE write transaction and returns one result per item, in
    order. Every request that was ready when the loop got to it has submitted its item by the
    time the flush runs (the flush is scheduled behind them), so N concurrent clients share one
    commit. Each ``submit`` returns its item's result once that commit is done; if
    ``apply_all`` raises, nothing was committed and every item of the group raises that
    exception.
    """

    def __init__(self, apply_all: Callable[[Sequence[Item]], list[Result]]) -> None:
        self._apply_all = apply_all
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        #: The loop a flush is scheduled on (None: none is).
        self._flush_loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        if self._flush_loop is not None and self._flush_loop is not loop:
            # The flush was scheduled on a loop that stopped before running it (a server shut
            # down mid-request): it will never run. Its items' requests were never answered,
            # so they are dropped, not applied (their senders send them again).
            self._waiting = []
            self._flush_loop = None
        done: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((item, done))
        if self._flush_loop is None:
            self._flush_loop = loop
            loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        self._flush_loop = None
        waiting, self._waiting = self._waiting, []
        try:
            outcome: list[Result] | Exception = self._apply_all([item for item, _ in waiting])
        except Exception as exc:
            outcome = exc
        _settle(waiting, outcome)


def _settle(
    waiting: Sequence[tuple[object, asyncio.Future[Result]]], outcome: list[Result] | Exception
) -> None:
    """Hand each waiting request its result, or the group's error. A request whose client
    left meanwhile (its future cancelled) is skipped: its item was applied all the same."""
    if not isinstance(outcome, Exception) and len(outcome) != len(waiting):
        outcome = RuntimeError(f"a group of {len(waiting)} items got {len(outcome)} results")
    for number, (_, done) in enumerate(waiting):
        if done.cancelled():
            continue
        if isinstance(outcome, Exception):
            done.set_exception(outcome)
        else:
            done.set_result(outcome[number])
