"""``@ledger.idempotent`` against Powertools for AWS Lambda's ``@idempotent_function`` with its
Redis persistence layer (on the local Redis, which keeps nothing on disk), in one process, on
one workload: N calls, every other one a repeat of an earlier key (``bench.ledger.workload``).

    python -m bench.idempotent [--calls N]

Prints each side's calls per second and ours as a ratio of the peer's, from one run. Ours
holds each new key on SQLite: a durable claim, the function, a durable completion (two
commits, synchronous=FULL or NORMAL); Powertools writes its in-progress and completed records
to Redis (two round trips, nothing durable).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path
from typing import Any

from ackledger import Ledger

from .ledger import Powertools, Request, _timed, workload

DEFAULT_CALLS = 4000


def ours(path: Path, synchronous: str) -> tuple[Ledger, Request]:
    ledger = Ledger(path, synchronous=synchronous)
    counter = itertools.count(1)

    def handle(case_id: str, work_id: str) -> dict[str, int]:
        return {"delivery_no": next(counter)}

    decorated: Any = ledger.idempotent(key=lambda case_id, work_id: f"{case_id}/{work_id}")(handle)
    return ledger, decorated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idempotent", description=__doc__)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="calls per side")
    args = parser.parse_args(argv)
    keys = workload(args.calls)
    rates: dict[str, float] = {}
    peer = Powertools()
    try:
        print(f"peer: {peer.version()}; {args.calls} calls, half of them repeats", flush=True)
        rates["Powertools idempotent_function + Redis"] = _timed(peer.request, "case", keys)
    finally:
        peer.cleanup()
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-idempotent-") as folder:
        for mode in ("FULL", "NORMAL"):
            ledger, request = ours(Path(folder) / f"{mode}.db", mode)
            try:
                rates[f"ledger.idempotent, SQLite synchronous={mode}"] = _timed(
                    request, "case", keys
                )
            finally:
                ledger.close()
    peer_rate = rates["Powertools idempotent_function + Redis"]
    for label, value in rates.items():
        print(f"  {label}: {value:,.0f} calls/s ({value / peer_rate:.2f} x the peer)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
