"""The sink's ``POST /events`` under 1, 8 and 32 concurrent keep-alive clients."""

from __future__ import annotations

from typing import Any

from .common import Plan, Results, scratch
from .fill import lab_event
from .load import run_load
from .relay import start_sink

CLIENT_COUNTS = (1, 8, 32)


def measure(plan: Plan, results: Results) -> None:
    print("sink under concurrent clients", flush=True)
    with scratch("sinkload") as folder:
        sink = start_sink(folder, "sink")
        try:
            for rep in range(plan.reps):
                for clients in CLIENT_COUNTS:

                    def make(client: int, number: int, tag: str = f"r{rep}c{clients}") -> Any:
                        return lab_event(f"{tag}-{client}-{number}", f"s{number % 64}", 1)

                    load = run_load(sink.base_url, "/events", clients, plan.load_seconds, make)
                    if set(load.statuses) != {200}:
                        results.notes.append(f"sink load with {clients} clients: {load.statuses}")
                    key = f"sink.c{clients}"
                    who = f"{clients} client" + ("s" if clients > 1 else "")
                    results.add(f"{key}.rps", f"sink /events, {who}", "/s", load.throughput)
                    results.add(f"{key}.p50", f"sink /events, {who}, p50", "ms", load.p(50))
                    results.add(f"{key}.p99", f"sink /events, {who}, p99", "ms", load.p(99))
        finally:
            sink.stop()
    for clients in CLIENT_COUNTS:
        key = f"sink.c{clients}"
        rps, p50, p99 = (results.get(f"{key}.{part}") or 0.0 for part in ("rps", "p50", "p99"))
        print(
            f"  {clients:>2} clients: {rps:,.0f}/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True
        )
