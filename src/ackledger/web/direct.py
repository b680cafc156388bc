"""Routes the HTTP protocol answers itself, without an ASGI request cycle.

uvicorn's request cycle (a scope dict, a ``RequestResponseCycle`` with its ``asyncio.Event``,
a task per request, the ASGI receive and send messages) cost the sink about a tenth of its
CPU per new event and more of a duplicate's (bench/CHANGES.md items 72-73). For a POST on
the exact path of a ``DirectRoute``, ``web.limited_protocol`` gathers the body itself and
calls ``answer(headers, body, started)``; the route returns its ``Answer`` at once, or a
``Pending`` one: a future (a group commit's) and the function that makes the answer once it
is done, called by the protocol in the future's callback. No task and no coroutine is made
for such a request.

Wrappers compose: the Guard checks a request before its route (``web.guard``), ``Observed``
times it (``web.observe``). An ASGI app that has such routes says so with ``direct_routes``
(``DirectApp``); ``direct_routes_of`` asks the outermost app, which asks the one it wraps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from .answers import Answer

Headers = Sequence[tuple[bytes, bytes]]
Done = TypeVar("Done")


class Pending(Generic[Done]):
    """An answer that waits for ``future``: ``finish(future)`` makes it once it is done (and
    reads the future's exception itself, if it has one)."""

    __slots__ = ("finish", "future")

    def __init__(
        self, future: asyncio.Future[Done], finish: Callable[[asyncio.Future[Done]], Answer]
    ) -> None:
        self.future = future
        self.finish = finish

    def then(self, after: Callable[[Answer], Answer], failed: Callable[[], None]) -> Pending[Done]:
        """The same wait, with ``after`` applied to its answer, or ``failed`` called if
        making it raises (a wrapper's own step)."""
        finish = self.finish

        def finished(future: asyncio.Future[Done]) -> Answer:
            try:
                answer = finish(future)
            except BaseException:
                failed()
                raise
            return after(answer)

        return Pending(self.future, finished)


Outcome = Answer | Pending[Any]


class DirectRoute(Protocol):
    """One POST route answered by the protocol. ``cap`` is the most body bytes it reads:
    a longer body is not read, and ``answer`` gets ``body=None`` (its 413). ``started`` is
    ``time.perf_counter()`` when the request's head was complete."""

    @property
    def cap(self) -> int: ...

    def answer(self, headers: Headers, body: bytes | None, started: float) -> Outcome: ...


@runtime_checkable
class DirectApp(Protocol):
    """An ASGI app that also answers some POST routes directly, by exact path."""

    def direct_routes(self) -> Mapping[str, DirectRoute]: ...


def direct_routes_of(app: object) -> dict[bytes, DirectRoute]:
    """The direct routes of ``app`` by raw path (none for an app that has none)."""
    if not isinstance(app, DirectApp):
        return {}
    # A path that is not ASCII never arrives raw as itself: its requests take the ASGI path.
    routes = app.direct_routes().items()
    return {path.encode(): route for path, route in routes if path.isascii()}


async def settled(outcome: Outcome) -> Answer:
    """The answer of an ``Outcome``, awaited (the ASGI path's way to call a direct route)."""
    if isinstance(outcome, Answer):
        return outcome
    with contextlib.suppress(Exception):  # finish reads it from the future
        await outcome.future
    return outcome.finish(outcome.future)
