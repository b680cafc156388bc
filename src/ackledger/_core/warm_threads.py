"""Blocking calls of an ``async`` caller on a few worker threads that stay up between calls.

``asyncio.to_thread`` goes through the loop's default executor: a context copy, a
``concurrent.futures.Future`` chained to an asyncio one, the executor's locks. For a call that
is itself a short SQLite transaction that machinery is a large share of the whole. Here a call
is a queue entry, and its outcome goes straight to the waiting asyncio future.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class WarmThreads:
    """``await threads.call(fn, *args)``: ``fn(*args)`` on one of ``count`` threads (named
    ``name``), started on first use and kept until ``close()``. Callers beyond ``count`` wait
    in the queue, as they would for the database's connections."""

    def __init__(self, count: int, name: str) -> None:
        if count < 1:
            raise ValueError(f"count: at least 1, got {count}")
        self._count, self._name = count, name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        #: The process the threads were started in (a forked child has none of them).
        self._started_in: int | None = None
        self._closed = False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.start(fn, *args)

    def start(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` queued for the threads; the future of its outcome, on the running
        loop (for a caller that is not a coroutine itself, such as a scheduled callback)."""
        if self._started_in != os.getpid():
            self._start()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((done.get_loop(), done, fn, args))
        return done

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker threads are closed")
            if self._started_in == os.getpid():
                return
            self._jobs = queue.SimpleQueue()
            for number in range(self._count):
                name = f"{self._name}-{number}"
                threading.Thread(
                    target=self._work, args=(self._jobs,), name=name, daemon=True
                ).start()
            # The threads hold the queue, not this object: once it is gone they end too.
            weakref.finalize(self, _stop, self._jobs, self._count)
            self._started_in = os.getpid()

    @staticmethod
    def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
        while (job := jobs.get()) is not None:
            loop, done, fn, args = job
            try:
                outcome: tuple[Callable[..., None], Any] = (_settle, fn(*args))
            except BaseException as exc:  # handed to the caller, as to_thread hands it
                outcome = (_fail, exc)
            del job, fn, args
            # A loop closed meanwhile has no one left to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(outcome[0], done, outcome[1])

    def close(self) -> None:
        """Let the threads end once the calls already queued are done."""
        with self._lock:
            self._closed = True
            if self._started_in == os.getpid():
                _stop(self._jobs, self._count)
            self._started_in = None  # a later call is refused, not queued for no thread


def _stop(jobs: queue.SimpleQueue[_Job | None], count: int) -> None:
    for _ in range(count):
        jobs.put(None)


def _settle(done: asyncio.Future[Any], result: Any) -> None:
    if not done.cancelled():  # its caller was cancelled: the call ran all the same
        done.set_result(result)


def _fail(done: asyncio.Future[Any], exc: BaseException) -> None:
    if not done.cancelled():
        done.set_exception(exc)
