"""``Inbox.asgi()`` mounted in the user's Starlette app under uvicorn (``receive_async`` per
event), against ``ackledger serve sink``: the same events from the same load client
(``bench/load.py``, every answer checked), each on a fresh SQLite file (synchronous=FULL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import Plan, Results, scratch
from .fill import lab_event
from .load import EVENTS, record, run_load
from .relay import start_sink
from .userapps import served

CLIENT_COUNTS = (1, 8)
WORDS = {"sink": "`serve sink`", "asgi": "`Inbox.asgi()` in Starlette under uvicorn"}


@contextmanager
def _server(who: str, folder: Path, name: str) -> Iterator[str]:
    if who == "sink":
        sink = start_sink(folder, name)
        try:
            yield sink.base_url
        finally:
            sink.stop()
    else:
        with served("inbox_app", folder, BENCH_INBOX_DB=str(folder / f"{name}.db")) as url:
            yield url


def measure(plan: Plan, results: Results) -> None:
    print("Inbox.asgi() under uvicorn against serve sink", flush=True)
    with scratch("asgi") as folder:
        for rep in range(plan.reps):
            # Each goes first in turn: the shared machine's speed drifts within a run.
            order = list(WORDS.items())
            for who, words in order if rep % 2 == 0 else order[::-1]:
                with _server(who, folder, f"{who}-{rep}") as base:
                    for clients in CLIENT_COUNTS:

                        def make(client: int, number: int, tag: str = f"{who}{rep}c{clients}"
                                 ) -> Any:  # fmt: skip
                            return lab_event(f"{tag}-{client}-{number}", f"s{number % 64}", 1)

                        load = run_load(base, EVENTS, clients, plan.load_seconds, make)
                        label = f"{words} /events, {clients} client(s)"
                        record(results, f"user.{who}.c{clients}", label, load)
