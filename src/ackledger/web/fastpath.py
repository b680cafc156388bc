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
import contextlib
import logging
import operator
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from threading import get_ident
from typing import Any, Generic, TypeVar

from starlette.types import Receive, Scope, Send

from ..errors import InvalidEvent
from .answers import Answer, invalid_answer
from .bodies import MAX_BODY_BYTES, BodyTooLarge, ClientGone, read_body
from .direct import Headers, Outcome, Pending, settled, waited

_LOG = logging.getLogger("ackledger.web")
_ITEM = operator.itemgetter(0)
_LISTENER_FAILED = "Exception in a group commit's listener"

#: A route's answer to its headers and body (None: over the cap, not read).
AnswerMaker = Callable[[Headers, bytes | None], Outcome]


class PostRoute:
    """One POST route, answered on both paths: as a ``DirectRoute`` (``web.direct``) by the
    protocol, and as an ASGI handler (a request the protocol leaves to uvicorn's cycle, or
    an app served by another server), which reads the body and waits for the same answer.

    It is an object, not a function, so that Starlette mounts it as an ASGI app as it is.
    ``answer`` is the function it was made with (no frame of its own per request).
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
        return await settled(self.answer(scope["headers"], body))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(scope, receive, send)


Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(Generic[Item, Result]):
    """Gather the items submitted in one turn of the event loop into one ``apply_all`` call.

    ``apply_all(items)`` runs in ONE write transaction and returns one result per item, in
    order. Every request that was ready when the loop got to it has submitted its item by the
    time the flush runs (the flush is scheduled behind them), so N concurrent clients share one
    commit. Each item's ``Pending`` is resolved in the flush itself, after the commit, and its
    listener (the protocol's answer) runs there: a lone client pays one extra turn of the loop,
    not the two an asyncio future's callback took (bench/CHANGES.md item 92). If
    ``apply_all`` raises, nothing was committed and every item of the group fails with that
    exception.

    With a ``thread`` (an executor of one worker), ``apply_all`` runs there, off the event
    loop: a user's handler never blocks the loop it is served from. One group is in the
    thread at a time; the requests that arrive meanwhile wait and form the next group.
    """

    def __init__(
        self,
        apply_all: Callable[[Sequence[Item]], list[Result]],
        *,
        thread: Executor | None = None,
    ) -> None:
        self._apply_all = apply_all
        self._thread_pool = thread
        #: A group is being applied in ``thread``; the next flush waits for it.
        self._busy = False
        self._waiting: list[tuple[Item, Pending[Result]]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        #: The loop the pending flush was scheduled on.
        self._flush_loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, item: Item) -> Result:
        pending: Pending[Result] = Pending(_no_answer)
        self.enqueue(item, pending)
        await waited(pending)
        return pending.result()

    def enqueue(self, item: Item, pending: Pending[Result]) -> None:
        """Add ``item`` to the next flush (on the running loop); ``pending`` gets its result
        (the direct routes, ``web.direct``, answer in its listener)."""
        # The running loop, remembered: ``asyncio.get_running_loop`` makes a ``getpid``
        # system call each time (CPython 3.11), one per request here. A remembered loop that
        # is running in this very thread is the running one (a thread runs one loop at a
        # time, and a thread's id is reused only once it has ended, its loop stopped with it).
        loop = self._loop
        thread = get_ident()
        if loop is None or self._thread != thread or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
            self._thread = thread
        if (self._scheduled or self._busy) and self._flush_loop is not loop:
            # The flush was scheduled on a loop that stopped before running it (a server shut
            # down mid-request): it will never run. Its items' requests were never answered,
            # so they are dropped, not applied (their senders send them again). Every item
            # waiting is that loop's: the first item on another loop reschedules here.
            self._waiting = []
            self._scheduled = False
            self._busy = False
        self._waiting.append((item, pending))
        if not self._scheduled:
            self._scheduled = True
            self._flush_loop = loop
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._busy:
            return  # the group in the thread flushes what waits once it is done
        waiting, self._waiting = self._waiting, []
        # A lone item's list made directly; a group's without a comprehension's frame.
        items = [waiting[0][0]] if len(waiting) == 1 else list(map(_ITEM, waiting))
        if self._thread_pool is not None:
            self._busy = True
            loop = self._flush_loop
            assert loop is not None
            done = self._thread_pool.submit(self._apply_all, items)
            done.add_done_callback(lambda done: _on_loop(loop, self._settle_thread, waiting, done))
            return
        try:
            results = self._apply_all(items)
        except Exception as exc:
            self._fail(waiting, exc)
            return
        self._resolve(waiting, results)

    def _settle_thread(
        self, waiting: list[tuple[Item, Pending[Result]]], done: Future[list[Result]]
    ) -> None:
        """On the loop: answer a group the thread applied, then flush what waited for it."""
        self._busy = False
        error = done.exception()
        if error is not None:
            self._fail(waiting, error)
        else:
            self._resolve(waiting, done.result())
        if self._waiting and not self._scheduled:
            loop = self._flush_loop
            assert loop is not None
            self._scheduled = True
            loop.call_soon(self._flush)

    @staticmethod
    def _fail(waiting: list[tuple[Item, Pending[Result]]], error: BaseException) -> None:
        for _, pending in waiting:
            try:
                pending.fail(error)
            except Exception:
                _LOG.exception(_LISTENER_FAILED)

    @staticmethod
    def _resolve(waiting: list[tuple[Item, Pending[Result]]], results: list[Result]) -> None:
        # A listener that raises is logged, as the loop logs a future's callback that raises,
        # and the rest of the group is still answered (the ``try`` in the loop, not a helper
        # called per item: a frame fewer a request).
        for (_, pending), result in zip(waiting, results, strict=True):
            try:
                pending.resolve(result)
            except Exception:
                _LOG.exception(_LISTENER_FAILED)


def _on_loop(loop: asyncio.AbstractEventLoop, call: Callable[..., object], *args: Any) -> None:
    """``call(*args)`` on ``loop``, from another thread; nothing if the loop has closed (a
    server stopped mid-group: its requests were never answered, their senders send again)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(call, *args)


def _no_answer(pending: Pending[Any]) -> Answer:
    raise TypeError("an item submitted to a group commit is awaited, not answered")
