"""How a service makes its blocking database calls: on the event loop or on worker threads."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread

from ..store import Backend

P = ParamSpec("P")
T = TypeVar("T")


class DatabaseCalls:
    """How a service makes its blocking database calls.

    On a backend with a pool of connections (PostgreSQL) each call runs on a worker thread,
    at most as many at once as the pool has connections, so one process has several
    transactions in flight, as several replicas would, and a slow commit or an unreachable
    database does not hold up ``/healthz``. SQLite has one connection and one writer: there
    the calls stay on the event loop, one at a time, which is all the database could do
    anyway, without a thread hop per request. (The ledger uses this; the sink stays on the
    event loop on every backend, for the reason given in sink/app.py.)
    """

    def __init__(self, backend: Backend) -> None:
        self.concurrency = backend.concurrency
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.concurrency <= 1:
            return func(*args, **kwargs)
        if self._limiter is None:  # made on the event loop, which anyio requires
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        return await anyio.to_thread.run_sync(
            functools.partial(func, *args, **kwargs), limiter=self._limiter
        )
