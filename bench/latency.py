"""What one event waits: p50/p99 from its publish to its mark as sent, open loop.

The headline's latency of a row (an outbox, a receiver, one at a time or batched): one
``ackledger relay`` process runs as an operator runs it (its default poll interval; on
PostgreSQL it also wakes on the publishes' NOTIFY) while this process commits one event per
transaction at a steady ``RATE``, far below what any of the relays sustains, so the figure is a
single event's wait and not a queue's. An event's latency is its row's ``sent_at`` less its
``created_at``: both float epoch seconds of the same clock, taken in the publishing transaction
just before its commit and after the receiver's ACK (a broker's confirm). They are read back
once every event is marked; a row with any event not marked sent is refused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ackledger import Outbox

from . import fill
from .common import Plan, Query, Results, percentile

#: Events per second the publisher commits: well below the slowest row's rate (PostgreSQL to
#: RabbitMQ one at a time, a few hundred a second on 2 busy cores), so no queue builds up.
RATE = 20.0
#: Events per row: ten seconds a row in a quick run.
QUICK_EVENTS = 200
FULL_EVENTS = 1_000
#: Seconds to wait, after the last publish, for the last mark.
SETTLE = 60.0


#: The HTTP rows' two modes: the key's last part, and the relay's flags.
HTTP_MODES: tuple[tuple[str, tuple[str, ...]], ...] = (("item", ()), ("batch", ("--batch",)))


def http_label(outbox: str, flags: Sequence[str]) -> str:
    return f"{outbox} -> serve sink, `{' '.join(('ackledger relay', *flags))}`"


def events_for(plan: Plan) -> int:
    return FULL_EVENTS if plan.name == "full" else QUICK_EVENTS


@dataclass(frozen=True)
class Waits:
    """One row's run: how many events were published and marked, and each marked one's wait."""

    published: int
    marked: int
    #: Seconds from ``created_at`` to ``sent_at``, per marked event.
    seconds: Sequence[float]


def publish(target: Path | str, events: Sequence[dict[str, Any]], rate: float = RATE) -> None:
    """Each event in its own committed transaction, event ``n`` due ``n / rate`` seconds after
    the first whatever the relay does (open loop: a late one does not push the next back)."""
    with Outbox(target) as outbox:
        start = time.perf_counter()
        for number, event in enumerate(events):
            wait = start + number / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            with outbox.transaction() as tx:
                tx.enqueue(event)


def _settle(query: Query) -> None:
    """Until nothing is pending, or for ``SETTLE`` seconds."""
    deadline = time.monotonic() + SETTLE
    while query("SELECT 1 FROM ackledger_outbox WHERE sent = 0 LIMIT 1", ()):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def measure_waits(
    source: Path | str, url: str, prefix: str, count: int, *flags: str, rate: float = RATE
) -> Waits:
    """Publish ``count`` events at ``rate`` into ``source`` while a relay (``flags``) sends
    them to ``url``; every marked event's wait."""
    # Imported here: the brokers section imports this module, and its package imports the
    # PostgreSQL section's, which imports this one too.
    from .brokers import ours

    # The schema exists before the relay opens the outbox.
    Outbox(source).close()
    warm = fill.event(f"{prefix}-warm", 0)
    with ours.reader(str(source)) as query, ours.relay(str(source), url, *flags, poll=None):
        # One event first, not counted: the clock starts once the relay is up and has sent.
        publish(source, [warm])
        _settle(query)
        publish(source, [fill.event(prefix, n) for n in range(count)], rate)
        _settle(query)
        rows = query("SELECT id, created_at, sent_at FROM ackledger_outbox WHERE sent = 1", ())
    seconds = [float(sent) - float(made) for key, made, sent in rows if key != warm["id"]]
    return Waits(count, len(seconds), seconds)


def record(results: Results, key: str, label: str, waits: Waits) -> None:
    """``key``.p50 and ``key``.p99 in ms, or both refused unless every event was marked."""
    for pct in (50, 99):
        words = f"{label}: p{pct} from publish to mark, {RATE:g} events/s open loop"
        if waits.marked < waits.published:
            why = f"{waits.marked} of {waits.published} events marked sent"
            results.refuse(f"{key}.p{pct}", words, "ms", why)
        else:
            results.add(f"{key}.p{pct}", words, "ms", 1000 * percentile(list(waits.seconds), pct))
    p50, p99 = results.get(f"{key}.p50"), results.get(f"{key}.p99")
    shown = f"{p50:.1f} / {p99:.1f} ms" if p50 and p99 else "refused"
    print(f"  latency {label}: {shown}", flush=True)


def run_row(
    results: Results, key: str, label: str, source: Path | str, url: str, *flags: str, count: int
) -> None:
    """One headline row's latency (``count`` events), measured and recorded."""
    record(results, key, label, measure_waits(source, url, key, count, *flags))
