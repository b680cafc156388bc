"""One asyncio event loop in a private thread, for a synchronous caller of an asyncio client.

A sender's ``send`` is synchronous (dispatch and the relay call it so); a client like nats-py
runs only on a loop. The loop starts on first use, keeps the client's connection between
calls, and ``stop`` ends it. The thread is a daemon: a sender never closed does not hold up
the process's exit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._loop is not None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result; it must bound its own time."""
        return asyncio.run_coroutine_threadsafe(coro, self._started()).result()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self) -> None:
        """Stop the loop and wait for its thread; a later ``run`` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
