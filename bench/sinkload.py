"""The sink's ``POST /events`` under 1, 8 and 32 concurrent keep-alive clients, and the sink's
CPU time per request (``/proc``: on a shared machine it swings far less than the rate)."""

from __future__ import annotations

from typing import Any

from .common import Plan, Results, cpu_seconds, scratch
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

                    cpu_before = cpu_seconds(sink.process.pid)
                    load = run_load(sink.base_url, "/events", clients, plan.load_seconds, make)
                    cpu = (cpu_seconds(sink.process.pid) - cpu_before) / max(load.requests, 1)
                    if set(load.statuses) != {200}:
                        results.notes.append(f"sink load with {clients} clients: {load.statuses}")
                    key = f"sink.c{clients}"
                    who = f"{clients} client" + ("s" if clients > 1 else "")
                    results.add(f"{key}.rps", f"sink /events, {who}", "/s", load.throughput)
                    results.add(f"{key}.p50", f"sink /events, {who}, p50", "ms", load.p(50))
                    results.add(f"{key}.p99", f"sink /events, {who}, p99", "ms", load.p(99))
                    results.add(f"{key}.cpu", f"sink /events, {who}, sink CPU", "µs", 1e6 * cpu)
        finally:
            sink.stop()
    for clients in CLIENT_COUNTS:
        key = f"sink.c{clients}"
        parts = ("rps", "p50", "p99", "cpu")
        rps, p50, p99, cpu = (results.get(f"{key}.{part}") or 0.0 for part in parts)
        print(
            f"  {clients:>2} clients: {rps:,.0f}/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
            f"sink CPU {cpu:.0f} µs a request",
            flush=True,
        )
