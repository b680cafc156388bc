"""How the inbox calls a user's handler: checked when registered, awaited when it is async.

A handler may be a plain function or an ``async def``. A coroutine that is made and never
awaited does nothing, and its receipt would still commit: the event answered "applied" with no
effect, for good. So the rule is strict: where the caller can await (the services, the
consumers, a mounted inbox), an awaitable a handler returns is awaited inside the receipt's
transaction; where it cannot (the sync ``Inbox.receive``), an ``async def`` handler is refused
before anything is written, and a plain handler that returns an awaitable is refused with its
whole transaction rolled back.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

__all__ = [
    "HandlerAwaiter",
    "NotAwaited",
    "async_refused",
    "call_handler",
    "check_handler",
    "describe_kinds",
    "is_async_handler",
]


class NotAwaited(TypeError):
    """A handler gave an awaitable where nothing can await it: the call is refused and its
    transaction rolled back (no receipt, no count), so the event stays pending at its source."""


def is_async_handler(handler: object) -> bool:
    """True for an ``async def`` function, a partial of one, or an object whose ``__call__``
    is one: what calling it returns must be awaited."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(type(handler), "__call__", None)  # noqa: B004 - the class's, not a check
    return not inspect.isroutine(handler) and inspect.iscoroutinefunction(call)


def check_handler(handler: object, what: str) -> None:
    """Refuse what cannot be called as ``handler(tx, event)``, with ``what`` naming it."""
    if not callable(handler):
        raise TypeError(f"{what} is not callable (got {type(handler).__name__})")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # some builtins have no signature to read; they are taken as they are
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise TypeError(f"{what} must take (tx, event): {exc}") from None


def describe_kinds(handlers: Mapping[str, object]) -> str:
    """One line for a service's start: each user handler's type and whether it is awaited."""
    shown = [
        f"{name} ({'async' if is_async_handler(handler) else 'plain'})"
        for name, handler in sorted(handlers.items())
    ]
    return ", ".join(shown) if shown else "none"


def async_refused(handler: object, event_type: str) -> NotAwaited:
    return NotAwaited(
        f"the handler of {event_type!r} ({_name(handler)}) is async: the sync Inbox.receive "
        "cannot await it, so nothing was written; call it where handlers are awaited "
        "(ackledger serve sink, consume, Inbox.asgi()) or make it a plain function"
    )


#: Awaits a handler's awaitable to its end, in the thread that holds the transaction.
Awaiter = Callable[[Awaitable[Any]], object]


def call_handler(
    handler: Callable[..., object], tx: object, event: dict[str, Any], awaiter: Awaiter | None
) -> None:
    """Run ``handler(tx, event)``; an awaitable it returns is awaited by ``awaiter``, or, with
    none, refused (``NotAwaited``) after closing it, so no "never awaited" coroutine is left."""
    returned = handler(tx, event)
    if returned is None or not inspect.isawaitable(returned):
        return
    if awaiter is None:
        _close(returned)
        raise NotAwaited(
            f"the handler of {event['type']!r} ({_name(handler)}) returned "
            f"{type(returned).__name__}, an awaitable the sync Inbox.receive cannot await; "
            "nothing was written"
        )
    awaiter(returned)


class HandlerAwaiter:
    """An event loop of its own for the async handlers of one write transaction.

    The transaction's thread is a worker's, never a service's event loop, and it holds the
    database while the handler runs, so the handler is awaited right there, on a loop made at
    its first use and closed when the transaction ends (a ``with`` block around it).
    """

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> HandlerAwaiter:
        return self

    def __call__(self, awaitable: Awaitable[Any]) -> object:
        loop = self._loop
        if loop is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                _close(awaitable)
                raise RuntimeError(
                    "an async handler is awaited in the inbox's own thread, never on a "
                    "running event loop: call the inbox from a worker thread"
                )
            loop = self._loop = asyncio.new_event_loop()
        return loop.run_until_complete(_awaited(awaitable))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()


async def _awaited(awaitable: Awaitable[Any]) -> object:
    return await awaitable


def _close(awaitable: object) -> None:
    """Close a coroutine that will never run, so it is not reported as never awaited."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _name(handler: object) -> str:
    """The handler as its author wrote it: a partial's function, an object's class."""
    wrapped = ""
    while isinstance(handler, functools.partial):
        handler, wrapped = handler.func, "partial of "
    return wrapped + str(getattr(handler, "__qualname__", None) or type(handler).__name__)
