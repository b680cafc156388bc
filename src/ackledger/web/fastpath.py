"""The hot POST routes, and group commit.

Starlette's middleware stack, router and request/response objects cost more per request than
the inbox's own work (docs/benchmarks.md). A ``PostRoute`` is a plain ASGI handler that makes
its answer from the request's headers and body: ``web.observe.Observed`` calls it without the
router (and times it without wrapping ``send``), while Starlette keeps it as a route: a GET on
that path still gets Starlette's 405, and a mounted app is routed as before.

``GroupCommit`` lets requests that are ready in the same turn of the event loop share one
write transaction: each request still gets its own result, and is answered only after the one
commit that made it durable. Under concurrency (the last group held more than one request) a
group waits a few more turns of the loop before it goes, so that the requests the last group's
answers bring back join it: one commit for more of them. A lone client never waits: as
PostgreSQL's ``commit_delay`` applies only with ``commit_siblings`` at work.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from starlette.types import Receive, Scope, Send

from .._core.warm_threads import WarmThreads
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
        # One coroutine from reading to sending: every level of them is resumed again when
        # the group commit answers. The body is read before its Content-Type is judged: the
        # CloudEvents binding's rules need the headers and the body together
        # (``web.cloudevents_http``).
        body: bytes | None
        answer: Answer | None = None
        try:
            body = await read_body(scope, receive, self.cap, check_type=None)
        except BodyTooLarge:
            body = None
        except ClientGone:
            return 0
        except InvalidEvent as exc:  # a second Content-Type
            answer = invalid_answer(str(exc), exc.field)
        if answer is None:
            answer = await self.answer(scope["headers"], body)
        await answer.send(send)
        return answer.status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(scope, receive, send)


Item = TypeVar("Item")
Result = TypeVar("Result")

#: The turns of the event loop a group waits under concurrency before it goes: each turn polls
#: the sockets once, a few µs when nothing else is ready, so a few turns give the clients just
#: answered time to send again on loopback without making anyone wait long.
WAIT_TURNS = 4


class GroupCommit(Generic[Item, Result]):
    """Gather the items submitted in one turn of the event loop into one ``apply_all`` call.

    ``apply_all(items)`` runs in ONE write transaction and returns one result per item, in
    order. Every request that was ready when the loop got to it has submitted its item by the
    time the flush runs (the flush is scheduled behind them), so N concurrent clients share one
    commit. Each ``submit`` returns its item's result once that commit is done; if
    ``apply_all`` raises, nothing was committed and every item of the group raises that
    exception.

    With a ``thread`` (``WarmThreads`` of one thread), ``apply_all`` runs there, off the
    event loop: a user's handler never blocks the loop it is served from. One group is in the
    thread at a time; the requests that arrive meanwhile wait and form the next group.
    """

    def __init__(
        self,
        apply_all: Callable[[Sequence[Item]], list[Result]],
        *,
        thread: WarmThreads | None = None,
    ) -> None:
        self._apply_all = apply_all
        self._thread_pool = thread
        #: A group is being applied in ``thread``; the next flush waits for it.
        self._busy = False
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._scheduled = False
        #: The loop the pending flush (or the group in the thread) belongs to.
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        #: How many items the last group held: more than one, and the next one waits.
        self._last_size = 0

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        if (self._scheduled or self._busy) and self._flush_loop is not loop:
            # The flush was scheduled on a loop that stopped before running it (a server shut
            # down mid-request): it will never run. Its items' requests were never answered,
            # so they are dropped, not applied (their senders send them again). Every item
            # waiting is that loop's: the first item on another loop reschedules here.
            self._waiting = []
            self._scheduled = False
            self._busy = False
        done: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((item, done))
        if not self._scheduled:
            self._schedule(loop, WAIT_TURNS if self._last_size > 1 else 0)
        return await done

    def _schedule(self, loop: asyncio.AbstractEventLoop, turns: int) -> None:
        self._scheduled = True
        self._flush_loop = loop
        loop.call_soon(self._turn, turns)

    def _turn(self, left: int) -> None:
        """One turn of the loop gone: the flush, or another turn to wait."""
        if left and self._flush_loop is not None:
            self._flush_loop.call_soon(self._turn, left - 1)
        else:
            self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        if self._busy or not self._waiting:
            return  # the group in the thread flushes what waits once it is done
        waiting, self._waiting = self._waiting, []
        items = [item for item, _ in waiting]
        self._last_size = len(items)
        if self._thread_pool is not None:
            self._busy = True
            applied = self._thread_pool.start(self._apply_all, items)
            applied.add_done_callback(functools.partial(self._settle_thread, waiting))
            return
        try:
            outcome: list[Result] | BaseException = self._apply_all(items)
        except Exception as exc:
            outcome = exc
        _settle(waiting, outcome)

    def _settle_thread(
        self,
        waiting: list[tuple[Item, asyncio.Future[Result]]],
        applied: asyncio.Future[list[Result]],
    ) -> None:
        """On the loop: answer a group the thread applied, then flush what waited for it."""
        self._busy = False
        error = applied.exception()
        _settle(waiting, error if error is not None else applied.result())
        if self._waiting and not self._scheduled:
            loop = self._flush_loop
            assert loop is not None
            self._schedule(loop, 0)  # they waited for a whole group already


def _settle(
    waiting: Sequence[tuple[object, asyncio.Future[Result]]], outcome: list[Result] | BaseException
) -> None:
    """Hand each waiting request its result, or the group's error. A request whose client
    left meanwhile (its future cancelled) is skipped: its item was applied all the same."""
    if not isinstance(outcome, BaseException) and len(outcome) != len(waiting):
        outcome = RuntimeError(f"a group of {len(waiting)} items got {len(outcome)} results")
    for number, (_, done) in enumerate(waiting):
        if done.cancelled():
            continue
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome[number])
