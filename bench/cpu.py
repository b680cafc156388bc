"""CPU time per event of the inbox's group commit and of the relay's own step, in this
process: figures that a loaded machine moves far less than a wall-clock rate, so they can
compare checkouts while other work runs (bench/CHANGES.md item 21).

``PYTHONPATH=<checkout>/src python -m bench.cpu [--runs N]``, run from this checkout,
measures the product in ``<checkout>/src``, on scratch SQLite files with synchronous=NORMAL
so that the fsync's wait, which is not the product's CPU, stays out of it:

- the inbox: ``receive_runs`` of N runs of 16 new reference events each (one transaction per
  run, as the sink's batch route makes them);
- the relay's step: ``dispatch_batch`` of N batches of 16 and ``dispatch`` of N events one at
  a time, to senders that acknowledge at once (the selection, the copy, the marks).

It measures every version back to af01309, whose inbox and outbox take the lab order
``{"id", "sku", "qty"}`` itself.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ackledger import Inbox, Outbox, dispatch, dispatch_batch

RUN = 16


def _events(runs: int, cloudevents: bool) -> list[list[dict[str, Any]]]:
    # Self-contained (no bench.fill): the product measured may be older than this bench.
    if cloudevents:
        from ackledger import warehouse
    batches: list[list[dict[str, Any]]] = []
    for run in range(runs):
        batch: list[dict[str, Any]] = []
        for n in range(RUN):
            event_id, sku, qty = f"r{run}-{n}", f"sku-{n % 8}", 1 + n % 7
            if cloudevents:
                batch.append(warehouse.event(event_id, sku, qty, source="urn:bench"))
            else:
                batch.append({"id": event_id, "sku": sku, "qty": qty})
        batches.append(batch)
    return batches


def cpu_per_event(runs: int) -> float:
    """Microseconds of this process's CPU per event over ``runs`` runs of ``RUN`` events."""
    with tempfile.TemporaryDirectory() as folder:
        inbox = Inbox(Path(folder) / "inbox.db", synchronous="NORMAL")
        # Before CONTRACT v2 was wired into the inbox (29aad51) it took the lab order itself.
        try:
            batches = _events(runs + 8, cloudevents=True)
            v1 = inbox.receive_runs([batches[0]])[0].error is not None
        except ImportError:
            v1 = True
        if v1:
            batches = _events(runs + 8, cloudevents=False)
        for batch in batches[:8]:  # warm the statement cache and the file's first pages
            inbox.receive_runs([batch])
        started = time.process_time()
        for batch in batches[8:]:
            (result,) = inbox.receive_runs([batch])
            if result.error is not None or len(result.statuses) != RUN:
                raise SystemExit(f"the inbox refused the bench's events: {result.error!r}")
        spent = time.process_time() - started
        inbox.close()
    return 1e6 * spent / (runs * RUN)


def _fill(outbox: Any, batches: list[list[dict[str, Any]]]) -> None:
    publish = getattr(outbox, "publish", None) or outbox.accept  # v1 had only accept
    for batch in batches:
        for event in batch:
            publish(event)


@contextmanager
def _outboxes(postgres: bool) -> Iterator[Callable[[str], str]]:
    """Targets for scratch outboxes: files in a folder, or fresh PostgreSQL databases."""
    if not postgres:
        with tempfile.TemporaryDirectory() as folder:
            yield lambda name: str(Path(folder) / f"{name}.db")
        return
    from .postgres import database

    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(database())


def relay_cpu_per_event(runs: int, *, batch: bool, postgres: bool = False) -> float:
    """Microseconds of CPU per event of the relay's step, the sender acknowledging at once
    (this process's CPU: on PostgreSQL the server's is not in it)."""
    with _outboxes(postgres) as target:
        outbox = Outbox(target("outbox"), synchronous="NORMAL")
        try:
            batches = _events(runs + 1, cloudevents=True)
            _fill(outbox, batches[:1])
        except Exception:  # an outbox from before CONTRACT v2 takes the lab order
            outbox.close()
            outbox = Outbox(target("outbox-v1"), synchronous="NORMAL")
            batches = _events(runs + 1, cloudevents=False)
            _fill(outbox, batches[:1])
        _fill(outbox, batches[1:])
        dispatch(outbox, lambda event: True, RUN)  # warm: the first batch
        started = time.process_time()
        if batch:
            while dispatch_batch(outbox, len, RUN):
                pass
        else:
            while dispatch(outbox, lambda event: True, RUN):
                pass
        spent = time.process_time() - started
        left = len(outbox.pending(limit=1))
        outbox.close()
    if left:
        raise SystemExit("the relay's step left events pending")
    return 1e6 * spent / (runs * RUN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000, help="runs of 16 events (1000)")
    # The least of several: other processes only ever add to a CPU time (cache misses, a
    # slower clock), so the smallest sample is the nearest to the code's own cost.
    parser.add_argument("--repeat", type=int, default=5, help="measurements; the least (5)")
    parser.add_argument(
        "--postgres", action="store_true", help="only the relay's step, its outbox on PostgreSQL"
    )
    args = parser.parse_args(argv)
    pg = args.postgres
    figures: dict[str, Callable[[], float]] = {
        "inbox receive_runs": lambda: cpu_per_event(args.runs),
        "relay step, dispatch_batch": lambda: relay_cpu_per_event(
            args.runs, batch=True, postgres=pg
        ),
        "relay step, dispatch": lambda: relay_cpu_per_event(args.runs, batch=False, postgres=pg),
    }
    if pg:
        del figures["inbox receive_runs"]
    for label, measure in figures.items():
        samples = [measure() for _ in range(args.repeat)]
        shown = ", ".join(f"{sample:.1f}" for sample in samples)
        print(f"{label}: {min(samples):.1f} us CPU per event (samples {shown})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
