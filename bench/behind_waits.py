"""``python -m bench.behind_waits [--events N]``: how long per-item ``dispatch(behind=...)``
waits for the previous event's mark before it can hand over the next (bench/CHANGES.md
item 97).

With marks behind, the mark of event k is committed on the marking thread while event k+1
travels; handing over k+1's mark first waits for k's. If the marks kept up, that wait would
be nil: what it is says how much of the per-item path the marks still hold up, and whether
it is every mark or a few slow ones. One run: a filled SQLite outbox (FULL), ``send_http``
into a real ``serve sink``, every wait of ``MarksBehind`` timed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from ackledger import Outbox
from ackledger._dev.procs import start_service
from ackledger.source.dispatch import dispatch
from ackledger.source.marking import MarksBehind
from ackledger.wire.http import send_http

#: A wait longer than this was a mark still committing (a hand-over alone takes a few µs).
BLOCKED = 20e-6


class _TimedBehind(MarksBehind):
    """``MarksBehind`` that notes how long each wait for a mark in flight took."""

    def __init__(self, reader: Outbox, marker: Outbox) -> None:
        super().__init__(reader, marker)
        self.waits: list[float] = []

    def wait(self) -> None:
        if not self.inflight:
            super().wait()
            return
        started = time.perf_counter()
        try:
            super().wait()
        finally:
            self.waits.append(time.perf_counter() - started)


def measure(events: int) -> str:
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-waits-") as name:
        folder = Path(name)
        sink = start_service(
            ["serve", "sink", "--db", str(folder / "sink.db"), "--port", "0"],
            stderr_path=folder / "sink.log",
        )
        try:
            with (
                Outbox(folder / "outbox.db", synchronous="FULL") as reader,
                Outbox(folder / "outbox.db", synchronous="FULL") as marker,
            ):
                for number in range(events):
                    reader.accept({"id": f"w-{number:07d}", "sku": "sku-1", "qty": 1})
                behind = _TimedBehind(reader, marker)
                url = sink.base_url + "/events"

                def send(event: dict[str, Any]) -> bool:
                    return send_http(event, url)

                started = time.perf_counter()
                while dispatch(reader, send, 16, behind=behind):
                    pass
                behind.close()
                wall = time.perf_counter() - started
        finally:
            sink.close()
    waits = behind.waits
    blocked = [one for one in waits if one > BLOCKED]
    return (
        f"{events} events: {wall / events * 1e6:.0f} µs per event; {len(waits)} waits, "
        f"{sum(waits) / events * 1e6:.1f} µs per event in all; {len(blocked)} over "
        f"{BLOCKED * 1e6:.0f} µs (mean {sum(blocked) / max(1, len(blocked)) * 1e6:.0f} µs, "
        f"{sum(blocked) / wall:.1%} of the run)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=3000)
    print(measure(parser.parse_args().events))


if __name__ == "__main__":
    main()
