"""The partition drills at full size: 4 relay processes, 20,000 events over 64 partitions.

The test suite runs the same drills (tests/partitions/test_relays.py) on a small outbox, which
proves the invariants in seconds; this section runs them as big as they used to be, for the
invariants under a long run and for the time it takes. ``--full`` only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .common import Plan, Results
from .postgres import available

EVENTS = 20_000
DRILLS = "tests/partitions/test_relays.py"
ROOT = Path(__file__).resolve().parent.parent


def measure(plan: Plan, results: Results) -> None:
    print("partition drills", flush=True)
    if plan.name != "full":
        results.skip("drills", "full runs only (python -m bench --full)")
        return
    why = available()
    if why is not None:
        results.skip("drills", why)
        return
    env = {**os.environ, "ACKLEDGER_RELAY_EVENTS": str(EVENTS), "CI": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", DRILLS]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    label = f"partition drills, {EVENTS:,} events, 4 relays (ordering, kill -9, pause)"
    if done.returncode != 0:
        # A time of drills that did not hold is no figure: shown as refused, with the tail.
        results.refuse("drills.partitions", label, "s", f"the drills failed: {done.stdout[-300:]}")
    else:
        results.add("drills.partitions", label, "s", took)
    print(f"  {label}: {took:.0f} s, exit {done.returncode}", flush=True)
