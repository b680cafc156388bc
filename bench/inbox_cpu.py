"""CPU time per event of the inbox's group commit, in this process: a figure that a loaded
machine moves far less than a wall-clock rate, so it can compare checkouts while other work
runs (bench/CHANGES.md item 21).

``PYTHONPATH=<checkout>/src python -m bench.inbox_cpu [--runs N]``, run from this checkout,
measures the product in ``<checkout>/src``: ``receive_runs`` of N runs of 16 new reference
events each (one transaction per run, as the sink's batch route makes them), on a scratch
SQLite file with synchronous=NORMAL so that the fsync's wait, which is not the product's CPU,
stays out of it. It measures every version back to af01309, whose inbox takes the lab order
``{"id", "sku", "qty"}`` itself.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from ackledger import Inbox

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inbox_cpu", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000, help="runs of 16 events (1000)")
    # The least of several: other processes only ever add to a CPU time (cache misses, a
    # slower clock), so the smallest sample is the nearest to the code's own cost.
    parser.add_argument("--repeat", type=int, default=5, help="measurements; the least (5)")
    args = parser.parse_args(argv)
    samples = [cpu_per_event(args.runs) for _ in range(args.repeat)]
    print(
        f"inbox receive_runs CPU per event: {min(samples):.1f} us "
        f"(samples {', '.join(f'{s:.1f}' for s in samples)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
