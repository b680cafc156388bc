"""The sink's ``POST /events`` under 1, 8 and 32 concurrent keep-alive clients, and the sink's
CPU time per request (``/proc``: on a shared machine it swings far less than the rate)."""

from __future__ import annotations

from typing import Any

from .common import Plan, Results, cpu_seconds, scratch
from .fill import lab_event
from .load import EVENTS, record, run_load
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
                    load = run_load(sink.base_url, EVENTS, clients, plan.load_seconds, make)
                    cpu = (cpu_seconds(sink.process.pid) - cpu_before) / max(load.requests, 1)
                    key = f"sink.c{clients}"
                    who = f"{clients} client" + ("s" if clients > 1 else "")
                    record(results, key, f"sink /events, {who}", load)
                    if load.all_expected:
                        results.add(f"{key}.cpu", f"sink /events, {who}, sink CPU", "µs", 1e6 * cpu)
                    else:
                        results.refuse(f"{key}.cpu", f"sink /events, {who}, sink CPU", "µs",
                                       "its workload was refused")  # fmt: skip
        finally:
            sink.stop()
