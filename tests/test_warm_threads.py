"""``WarmThreads``: the worker threads the HTTP middleware runs its database calls on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ackledger._core.warm_threads import WarmThreads


def test_a_call_runs_off_the_loop_and_hands_back_its_result_or_error() -> None:
    threads = WarmThreads(1, "test-warm")

    def boom() -> None:
        raise KeyError("gone")

    async def main() -> None:
        loop_thread = threading.get_ident()
        ran_on = await threads.call(threading.get_ident)
        assert ran_on != loop_thread
        assert await threads.call(pow, 2, 10) == 1024
        with pytest.raises(KeyError, match="gone"):
            await threads.call(boom)
        # The thread survives its call's error, and is the same one (kept, not started anew).
        assert await threads.call(threading.get_ident) == ran_on

    asyncio.run(main())
    threads.close()


def test_no_more_calls_at_once_than_threads() -> None:
    threads = WarmThreads(2, "test-warm")
    lock = threading.Lock()
    running, most = [0], [0]

    def work() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    async def main() -> None:
        await asyncio.gather(*(threads.call(work) for _ in range(8)))

    asyncio.run(main())
    threads.close()
    assert most[0] == 2


def test_a_cancelled_caller_leaves_the_threads_serving() -> None:
    threads = WarmThreads(1, "test-warm")
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.05)
        finished.set()

    async def main() -> None:
        waiting = asyncio.ensure_future(threads.call(slow))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await threads.call(pow, 3, 2) == 9
        assert finished.is_set()  # the cancelled call still ran, before the next one

    asyncio.run(main())
    threads.close()


def test_close_ends_the_threads() -> None:
    threads = WarmThreads(2, "test-closing")

    async def main() -> None:
        await asyncio.gather(threads.call(time.sleep, 0.01), threads.call(time.sleep, 0.01))

    asyncio.run(main())
    named = [t for t in threading.enumerate() if t.name.startswith("test-closing-")]
    assert len(named) == 2
    threads.close()
    for thread in named:
        thread.join(5)
        assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(threads.call(pow, 1, 1))
