"""The own HTTP sender's CPU per event, one event at a time: a copy against the stored text.

``PYTHONPATH=src python -m bench.stored_send [--events N] [--rounds R]`` starts ``serve
sink`` and sends new lab and generic events to its ``/events`` with one ``HttpSender``, in
blocks that alternate (ABBA) between the copy path (``send(copy)``: validation and canonical
JSON again, what ``dispatch`` did before) and the stored path (``send_stored_event``: the
outbox's text as it is). Only this process's CPU time is counted (the sink is another
process), so the figure is the sender's own work and a loaded machine moves it little. No
outbox: each event's stored text is made as ``Outbox.publish`` stores it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import ackledger
from ackledger.envelope import canonical_json, validate_cloudevent
from ackledger.source.dispatch import _copy  # the very copy dispatch hands a send
from ackledger.store.pending import pending_events, pending_rows
from ackledger.wire.sender import HttpSender
from ackledger.wire.stored import Stored

from . import fill
from .common import scratch
from .relay import start_sink


def _selection(kind: str, count: int, make: Callable[[str, int], dict[str, Any]]) -> list[Any]:
    rows = []
    for n in range(count):
        valid = validate_cloudevent(make(kind, n))
        key = valid.get("partitionkey")
        rows.append((n + 1, valid["id"], valid["source"], key, canonical_json(valid)))
    return pending_events(pending_rows(rows))


def _cpu_us(block: list[Any], send: Callable[[Any], object]) -> float:
    started = time.process_time()
    for item in block:
        assert send(item) is True
    return 1e6 * (time.process_time() - started) / len(block)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stored_send", description=__doc__)
    parser.add_argument("--events", type=int, default=500, help="events per block (500)")
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds (4)")
    args = parser.parse_args(argv)
    with scratch("stored-send") as folder:
        sink = start_sink(folder, "sink", "--handlers", "bench.handlers:HANDLERS")
        try:
            wire = ackledger.sender(sink.base_url + "/events")
            assert isinstance(wire, HttpSender)
            for what, make in (("lab", fill.event), ("generic", fill.generic)):
                samples: dict[str, list[float]] = {"copy": [], "stored": []}
                for r in range(args.rounds):
                    order = ("copy", "stored") if r % 2 == 0 else ("stored", "copy")
                    for path in order:
                        block = _selection(f"{what[0]}{path[0]}{r}", args.events, make)
                        if path == "copy":
                            value = _cpu_us(block, lambda item: wire.send(_copy(item)))
                        else:
                            value = _cpu_us(
                                block, lambda item: wire.send_stored_event(Stored(item, item.text))
                            )
                        samples[path].append(value)
                copy, stored = (statistics.median(samples[p]) for p in ("copy", "stored"))
                print(
                    f"{what}: send(copy) {copy:.1f} µs CPU per event "
                    f"(samples {', '.join(f'{v:.1f}' for v in samples['copy'])}); "
                    f"send_stored_event {stored:.1f} µs "
                    f"(samples {', '.join(f'{v:.1f}' for v in samples['stored'])}); "
                    f"stored / copy {stored / copy:.2f}",
                    flush=True,
                )
            wire.close()
        finally:
            sink.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
