"""Routes the HTTP protocol answers itself, without an ASGI request cycle.

uvicorn's request cycle (a scope dict, a ``RequestResponseCycle`` with its ``asyncio.Event``,
a task per request, the ASGI receive and send messages) cost the sink about a tenth of its
CPU per new event and more of a duplicate's (bench/CHANGES.md items 72-73). For a POST on
the exact path of a ``DirectRoute``, ``web.limited_protocol`` gathers the body itself and
calls ``answer(headers, body)``; the route returns its ``Answer`` at once, or a ``Pending``
one: a result still to come (a group commit's) and the function that makes the answer from
it, called by the protocol as soon as the result is in. No task, no coroutine and no
asyncio future is made for such a request.

The steps around a route are not wrappers calling each other per request: ``Served`` holds
the route with the Guard's check before it (``web.guard``) and ``Observed``'s timing after it
(``web.observe``), each a bound function made once at start, and the protocol calls them in
turn (bench/CHANGES.md item 92). An ASGI app that has such routes says so with
``direct_routes`` (``DirectApp``); ``direct_routes_of`` asks the outermost app, which asks the
one it wraps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from .answers import Answer

Headers = Sequence[tuple[bytes, bytes]]
Done = TypeVar("Done")

_UNSET: Any = object()


class Pending(Generic[Done]):
    """An answer that waits for a result: whoever has it calls ``resolve`` (or ``fail``),
    and the one listener (the protocol, or ``settled``) is called then, at once, in the same
    turn of the loop. ``answer()`` is ``finish(self)``; ``finish`` reads the result with
    ``result()``, which raises the failure, as a future's does."""

    __slots__ = ("_error", "_listener", "_result", "finish")

    def __init__(self, finish: Callable[[Pending[Done]], Answer]) -> None:
        self.finish = finish
        self._result: Done = _UNSET
        self._error: BaseException | None = None
        self._listener: Callable[[Pending[Done]], object] | None = None

    def done(self) -> bool:
        return self._result is not _UNSET or self._error is not None

    def result(self) -> Done:
        if self._error is not None:
            raise self._error
        if self._result is _UNSET:
            raise RuntimeError("the result is not in yet")
        return self._result

    def answer(self) -> Answer:
        return self.finish(self)

    def listen(self, listener: Callable[[Pending[Done]], object]) -> None:
        """Call ``listener(self)`` once the result is in (now, if it is)."""
        if self._result is not _UNSET or self._error is not None:
            listener(self)
        else:
            self._listener = listener

    def resolve(self, result: Done) -> None:
        self._result = result
        listener, self._listener = self._listener, None
        if listener is not None:
            listener(self)

    def fail(self, error: BaseException) -> None:
        self._error = error
        listener, self._listener = self._listener, None
        if listener is not None:
            listener(self)


Outcome = Answer | Pending[Any]


class DirectRoute(Protocol):
    """One POST route answered by the protocol. ``cap`` is the most body bytes it reads:
    a longer body is not read, and ``answer`` gets ``body=None`` (its 413)."""

    @property
    def cap(self) -> int: ...

    def answer(self, headers: Headers, body: bytes | None) -> Outcome: ...


#: The Guard's check: the refusal of a request, or None to let it through.
Refuse = Callable[[Headers], Answer | None]
#: ``Observed``'s timing of one answer: (status, ``time.perf_counter()`` at the head's end).
Observe = Callable[[int, float], None]


class Served:
    """A direct route as the protocol runs it: ``refuse`` first (a refused request reaches
    neither the route nor the timing, as on the ASGI path, where the Guard is outside
    ``Observed``), then ``answer``, then ``observe`` with the answer's status (500 when the
    route raised). A step that is None is skipped."""

    __slots__ = ("answer", "cap", "observe", "refuse")

    def __init__(
        self,
        cap: int,
        answer: Callable[[Headers, bytes | None], Outcome],
        refuse: Refuse | None = None,
        observe: Observe | None = None,
    ) -> None:
        self.cap = cap
        self.answer = answer
        self.refuse = refuse
        self.observe = observe


def served(route: DirectRoute | Served) -> Served:
    """``route`` as ``Served`` (a plain ``DirectRoute`` has neither check nor timing)."""
    if isinstance(route, Served):
        return route
    return Served(route.cap, route.answer)


@runtime_checkable
class DirectApp(Protocol):
    """An ASGI app that also answers some POST routes directly, by exact path."""

    def direct_routes(self) -> Mapping[str, DirectRoute | Served]: ...


def direct_routes_of(app: object) -> dict[bytes, Served]:
    """The direct routes of ``app`` by raw path (none for an app that has none)."""
    if not isinstance(app, DirectApp):
        return {}
    # A path that is not ASCII never arrives raw as itself: its requests take the ASGI path.
    routes = app.direct_routes().items()
    return {path.encode(): served(route) for path, route in routes if path.isascii()}


async def waited(pending: Pending[Any]) -> None:
    """Return once ``pending``'s result is in (on the running loop)."""
    if pending.done():
        return
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: Pending[Any]) -> None:
        if not woken.done():  # the waiting task may have been cancelled meanwhile
            woken.set_result(None)

    pending.listen(wake)
    await woken


async def settled(outcome: Outcome) -> Answer:
    """The answer of an ``Outcome``, awaited (the ASGI path's way to call a direct route)."""
    if isinstance(outcome, Answer):
        return outcome
    await waited(outcome)
    return outcome.answer()
