"""PostgreSQL outbox -> RabbitMQ (and NATS JetStream): ours, faststream-outbox, the raw floors.

Everything in one run, on the local servers: per repetition the raw pika floors, then our relay
``--per-item``, faststream-outbox at its defaults, our relay with no flags (batches of 16, eight
in flight), with ``--inflight 1``, and faststream-outbox at its best settings, alternately, each
on a fresh database and a fresh durable queue; then NATS JetStream, ours against nats-py's
floor. The ratios put each at its defaults against the other's, and each at its best. After the
timed runs, a few measured facts: what each relay does with messages RabbitMQ returns as
unroutable, and the delivery mode of the messages each one left in its queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import fill, latency
from ..common import Plan, Results, scratch
from ..postgres import available as postgres_available
from ..postgres import database
from . import jetstream, ours, peer, rabbit

#: Events per timed run of the batch relays (ours with no flags among them): 20,000, in a
#: quick run too. At 2,000
#: the peer's best settings (4 workers x fetch 500) drained the table in one fetch round, and
#: its "rate" was that round's, above RabbitMQ's own floor.
EVENTS = 20_000
#: The least number of fetch rounds each of the peer's workers must make in a timed run: its
#: count is raised to this many rounds whatever ``--events`` says (best: 4 x 500 x 10 = 20,000).
PEER_ROUNDS = 10
#: The per-item relays (ours, and the peer at its defaults: fetch 10, so 400 rounds) in a quick
#: run: their rate does not depend on the count, and 20,000 one at a time costs a minute each.
QUICK_ITEM_EVENTS = 4_000
#: The raw floors' messages: one at a time is slow, and its rate does not depend on the count.
FLOOR_EVENTS = 5_000
WINDOWS = (1, 16, 256)
#: Events of the unroutable runs.
RETURNED_EVENTS = 200
#: ``relay --inflight N``: the batches in flight of the one-batch-at-a-time runs (the
#: relay's default to a broker is ``DEFAULT_INFLIGHT``).
INFLIGHT = 1
TYPE = "warehouse.stock.added"


@dataclass(frozen=True)
class Counts:
    """Events per timed run: the batch relays' (ours and the peer's best), the per-item ones'."""

    batch: int
    item: int

    def peer(self, settings: peer.Settings) -> int:
        """The peer's count: ours for its kind of run, but never fewer than ``PEER_ROUNDS``
        fetch rounds per worker."""
        given = self.item if settings.flush == 1 else self.batch
        return max(given, PEER_ROUNDS * settings.workers * settings.fetch)


def counts_for(plan: Plan, events: int | None = None) -> Counts:
    """``events`` (default ``EVENTS``) for every run of a full plan; a quick plan caps the
    per-item runs at ``QUICK_ITEM_EVENTS``. The peer's floor of rounds applies on top."""
    total = events or EVENTS
    batch = total
    item = total if plan.name == "full" else min(total, QUICK_ITEM_EVENTS)
    return Counts(batch, item)


def _event(tag: str, number: int) -> dict[str, Any]:
    return fill.lab_event(f"{tag}-{number:07d}", f"p{number % 64}", 1)


def _body() -> bytes:
    from ackledger.envelope import canonical_json

    return canonical_json(_event("floor", 0)).encode()


def measure(plan: Plan, results: Results, events: int | None = None) -> None:
    print("brokers", flush=True)
    counts = counts_for(plan, events)
    told = (
        f"events per timed run: {counts.batch:,} for our batch relays, {counts.item:,} for "
        f"ours per item, {counts.peer(peer.BEST):,} and {counts.peer(peer.DEFAULT):,} for "
        f"faststream-outbox at its best and defaults (never fewer than {PEER_ROUNDS} fetch "
        "rounds per worker)"
    )
    print(f"  {told}", flush=True)
    results.notes.append(told[0].upper() + told[1:])
    reps = max(1, plan.reps // 3)
    for section, why in (("brokers", postgres_available()), ("brokers", rabbit.available())):
        if why is not None:
            results.skip(section, why)
            return
    why_peer = peer.ensure()
    if why_peer is not None:
        results.skip("brokers.peer", why_peer)
    for rep in range(reps):
        _rabbit_round(results, rep, counts, why_peer is None)
    _facts(results, why_peer is None)
    why_nats = jetstream.available()
    if why_nats is not None:
        results.skip("brokers.nats", why_nats)
    else:
        for rep in range(reps):
            _nats_round(results, rep, counts)
    brokers = ["rabbit"] if why_nats is not None else ["rabbit", "nats"]
    for rep in range(reps):
        _sqlite_round(results, rep, counts, brokers)
    _latencies(plan, results, brokers)
    _print_ratios(results)


def _add(results: Results, key: str, label: str, value: float, unit: str = "/s") -> None:
    results.add(key, label, unit, value)
    shown = f"{value:,.0f}/s" if unit == "/s" else f"{value:g} {unit}"
    print(f"  {label}: {shown}", flush=True)


def _rabbit_round(results: Results, rep: int, counts: Counts, with_peer: bool) -> None:
    body = _body()
    count = FLOOR_EVENTS
    for window in WINDOWS:
        value = rabbit.floor_rate(body, count, window)
        label = f"RabbitMQ floor: pika, persistent + mandatory, confirms, window {window}"
        _add(results, f"broker.floor.rabbit.w{window}", label, value)
    runs: list[tuple[str, Callable[[], float]]] = [
        ("item", lambda: _ours_rabbit(results, rep, "item", counts.item)),
        ("peer.default", lambda: _peer(results, rep, counts.peer(peer.DEFAULT), peer.DEFAULT)),
        ("default", lambda: _ours_rabbit(results, rep, "default", counts.batch)),
        ("onebatch", lambda: _ours_rabbit(results, rep, "onebatch", counts.batch)),
        ("peer.best", lambda: _peer(results, rep, counts.peer(peer.BEST), peer.BEST)),
        ("pipeline", lambda: _ours_rabbit(results, rep, "pipeline", counts.batch)),
        ("leased", lambda: _ours_rabbit(results, rep, "leased", counts.batch)),
    ]
    for name, run in runs:
        if name.startswith("peer") and not with_peer:
            continue
        run()


#: Our relay's runs: the flags each adds to ``ackledger relay --source S --to URL``. No flags
#: batches to a broker (16 a round, eight batches in flight); ``--inflight 1`` waits for each
#: batch's confirms before the next; ``--pipeline`` (one batch in flight) commits the marks on
#: a second connection during the next send ("pipeline" the single loop's, "leased" the
#: partition relay's, whose marks still check the lease).
FLAGS: dict[str, tuple[str, ...]] = {
    "item": ("--per-item",),
    "default": (),
    "onebatch": ("--inflight", str(INFLIGHT)),
    "pipeline": ("--single", "--pipeline"),
    "leased": ("--pipeline",),
}
#: The runs that compete for "ours at its best" (every guarantee kept in each).
BEST = ("default", "onebatch", "pipeline", "leased")


def shown(kind: str) -> str:
    """The command line of one of our runs, as the page shows it."""
    return " ".join(("ackledger relay", *FLAGS[kind]))


def _ours_rabbit(results: Results, rep: int, kind: str, total: int) -> float:
    with database() as source, rabbit.route(f"ours-{kind}") as where:
        fill.pending_events(source, f"r{rep}{kind}", total, _event)
        value = ours.rate(source, where.url(), total, *FLAGS[kind])
        modes = rabbit.facts(where.queue).modes
    _add(results, f"broker.ours.{kind}", f"ours: `{shown(kind)}` -> RabbitMQ", value)
    _modes(results, f"ours.{kind}", modes)
    return value


def _peer(results: Results, rep: int, total: int, settings: peer.Settings) -> float:
    event = _event(f"peer{rep}", 0)
    with database() as db, rabbit.route(f"peer-{settings.name}") as where:
        run = peer.relay(db, where, settings, total, event)
        modes = rabbit.facts(where.queue).modes
    label = f"faststream-outbox -> RabbitMQ, {settings.name} ({settings.shown})"
    _add(results, f"broker.peer.{settings.name}", label, run.rate)
    _modes(results, f"peer.{settings.name}", modes)
    return run.rate


def _modes(results: Results, who: str, modes: dict[int, int]) -> None:
    """The share of the messages read back from the queue that were persistent."""
    read = sum(modes.values())
    share = modes.get(2, 0) / read if read else float("nan")
    results.add(f"broker.fact.persistent.{who}", f"{who}: share of messages read back with "
                "delivery_mode 2 (persistent)", "share", share)  # fmt: skip


def _facts(results: Results, with_peer: bool) -> None:
    """What each relay does when RabbitMQ returns every message as unroutable."""
    label = f"of {RETURNED_EVENTS} events RabbitMQ returned as unroutable"
    with database() as source, rabbit.route("ours-return") as where:
        fill.pending_events(source, "ret", RETURNED_EVENTS, _event)
        outcome = ours.unroutable(source, where.url("nowhere"), RETURNED_EVENTS)
        queued = rabbit.facts(where.queue).messages
    _add(
        results, "broker.fact.return.ours.sent", f"ours: marked sent, {label}", outcome.sent, "rows"
    )
    _add(results, "broker.fact.return.ours.kept", f"ours: kept (quarantined or pending), {label}",
         outcome.quarantined + outcome.pending, "rows")  # fmt: skip
    _add(results, "broker.fact.return.ours.queued", f"ours: messages in the queue, {label}",
         queued, "messages")  # fmt: skip
    if not with_peer:
        return
    with database() as db, rabbit.route("peer-return") as where:
        run = peer.relay(db, where, peer.DEFAULT, RETURNED_EVENTS, _event("pret", 0),
                         routing_key="nowhere", timeout=120, settle=10)  # fmt: skip
        queued = rabbit.facts(where.queue).messages
    _add(results, "broker.fact.return.peer.deleted",
         f"faststream-outbox (defaults): rows deleted, {label}",
         RETURNED_EVENTS - run.rows_left, "rows")  # fmt: skip
    _add(
        results,
        "broker.fact.return.peer.queued",
        f"faststream-outbox (defaults): messages in the queue, {label}",
        queued,
        "messages",
    )


def _nats_round(results: Results, rep: int, counts: Counts) -> None:
    body = _body()
    for window in WINDOWS:
        value = jetstream.floor_rate(body, FLOOR_EVENTS, window)
        _add(results, f"broker.floor.nats.w{window}",
             f"NATS floor: nats-py JetStream publish + PubAck, window {window}", value)  # fmt: skip
    for kind in ("item", "default", "onebatch"):
        total = counts.item if kind == "item" else counts.batch
        with database() as source, jetstream.stream(f"ours{kind}") as where:
            fill.pending_events(source, f"n{rep}{kind}", total, _event)
            value = ours.rate(source, where.url(), total, *FLAGS[kind])
            stored = jetstream.messages(where)
        _add(results, f"broker.nats.{kind}", f"ours: `{shown(kind)}` -> NATS JetStream",
             value)  # fmt: skip
        if stored < total:
            results.notes.append(f"NATS {kind}: the stream holds {stored} of {total} messages")


#: The headline's two modes to a broker: the key's last part, and the run of ``FLAGS``.
MODES = (("item", "item"), ("batch", "default"))


#: The brokers of the headline, by the name in its figures' keys.
BROKER_NAMES = {"rabbit": "RabbitMQ", "nats": "NATS JetStream"}


@contextmanager
def _receiver(broker: str, tag: str) -> Iterator[tuple[str, Callable[[], int]]]:
    """A fresh queue or stream: our relay's URL to it, and how many messages it holds."""
    if broker == "rabbit":
        with rabbit.route(tag) as where:
            yield where.url(), lambda: rabbit.facts(where.queue).messages
    else:
        with jetstream.stream(tag) as stream:
            yield stream.url(), lambda: jetstream.messages(stream)


def _sqlite_round(results: Results, rep: int, counts: Counts, brokers: list[str]) -> None:
    """A SQLite outbox (a file, as a SQLite user has it) to each broker, both modes."""
    with scratch("brokers-sqlite") as folder:
        for _, kind in MODES:
            total = counts.item if kind == "item" else counts.batch
            for broker in brokers:
                source = str(folder / f"{broker}-{kind}.db")
                with _receiver(broker, f"sqlite{kind}") as (url, held):
                    fill.pending_events(source, f"s{broker}{rep}{kind}", total, _event)
                    value = ours.rate(source, url, total, *FLAGS[kind])
                    stored = held()
                label = f"ours, SQLite outbox: `{shown(kind)}` -> {BROKER_NAMES[broker]}"
                key = f"broker.sqlite.{broker}.{kind}"
                _delivered(results, key, label, value, stored=stored, total=total)


def _delivered(
    results: Results, key: str, label: str, value: float, *, stored: int, total: int
) -> None:
    """The rate, or refused unless every event was marked sent (``value`` is NaN otherwise)
    and the broker holds every one of them."""
    if math.isnan(value) or stored < total:
        why = f"{stored} of {total} events in the broker" if stored < total else "not all sent"
        results.refuse(key, label, "/s", why)
        print(f"  REFUSED {label}: {why}", flush=True)
        return
    _add(results, key, label, value)


def _latencies(plan: Plan, results: Results, brokers: list[str]) -> None:
    """The headline's p50/p99 of each outbox to each broker, both modes (``bench.latency``)."""
    count = latency.events_for(plan)
    with scratch("brokers-latency") as folder:
        for outbox in ("sqlite", "pg"):
            for mode, kind in MODES:
                for broker in brokers:
                    key = f"latency.{outbox}.{broker}.{mode}"
                    label = f"{outbox} -> {BROKER_NAMES[broker]}, `{shown(kind)}`"
                    with _receiver(broker, f"lat{outbox}{kind}") as (url, _):
                        if outbox == "sqlite":
                            source = folder / f"{broker}-{kind}.db"
                            latency.run_row(results, key, label, source, url, *FLAGS[kind],
                                            count=count)  # fmt: skip
                            continue
                        with database() as db:
                            latency.run_row(results, key, label, db, url, *FLAGS[kind],
                                            count=count)  # fmt: skip


#: The numerator of the ratios of ours at its best: the fastest of the ``BEST`` runs.
OURS_BEST = "broker.ours.best"

#: (label, numerator, denominator, goal): the goals, and the ratios worth a look.
RATIOS: tuple[tuple[str, str, str, float | None], ...] = (
    ("ours at its defaults (`ackledger relay`) / faststream-outbox at its defaults",
     "broker.ours.default", "broker.peer.default", 10.0),
    ("ours at its best / faststream-outbox at its best (persistent)", OURS_BEST,
     "broker.peer.best", 3.0),
    ("ours at its defaults / RabbitMQ floor, window 16", "broker.ours.default",
     "broker.floor.rabbit.w16", 0.8),
    (f"ours `--inflight {INFLIGHT}` / faststream-outbox at its defaults",
     "broker.ours.onebatch", "broker.peer.default", None),
    (f"ours `--inflight {INFLIGHT}` / RabbitMQ floor, window 16", "broker.ours.onebatch",
     "broker.floor.rabbit.w16", None),
    ("ours `--pipeline` / faststream-outbox at its best", "broker.ours.leased",
     "broker.peer.best", None),
    ("ours `--single --pipeline` / faststream-outbox at its best", "broker.ours.pipeline",
     "broker.peer.best", None),
    ("ours at its defaults / ours `--per-item`", "broker.ours.default", "broker.ours.item",
     None),
    ("ours `--per-item` / faststream-outbox at its defaults", "broker.ours.item",
     "broker.peer.default", None),
    ("ours `--per-item` / RabbitMQ floor, one at a time", "broker.ours.item",
     "broker.floor.rabbit.w1", None),
    ("ours at its defaults / NATS floor, window 16", "broker.nats.default",
     "broker.floor.nats.w16", None),
    (f"ours `--inflight {INFLIGHT}` / NATS floor, window 16", "broker.nats.onebatch",
     "broker.floor.nats.w16", None),
    ("ours `--per-item` / NATS floor, one at a time", "broker.nats.item", "broker.floor.nats.w1",
     None),
)  # fmt: skip


def best(results: Results) -> tuple[str, float] | None:
    """(the run, its events/s) of the fastest of our ``BEST`` runs to RabbitMQ."""
    found = [(kind, results.get(f"broker.ours.{kind}")) for kind in BEST]
    measured = [(kind, value) for kind, value in found if value is not None]
    return max(measured, key=lambda item: item[1]) if measured else None


def ratios(results: Results) -> list[tuple[str, float | None, float | None]]:
    """(label, measured ratio or None, goal or None) for every ratio of ``RATIOS``; ours at
    its best is named in its label."""
    found: list[tuple[str, float | None, float | None]] = []
    fastest = best(results)
    for label, top, bottom, goal in RATIOS:
        a, named = results.get(top), label
        if top == OURS_BEST and fastest is not None:
            a = fastest[1]
            named = label.replace("its best", f"its best (`{shown(fastest[0])}`)", 1)
        b = results.get(bottom)
        value = a / b if a is not None and b and not math.isnan(a) else None
        found.append((named, value, goal))
    return found


def _print_ratios(results: Results) -> None:
    for label, value, goal in ratios(results):
        if value is None:
            continue
        verdict = "" if goal is None else (" met" if value >= goal else " NOT met")
        target = "" if goal is None else f" (goal >= {goal:g})"
        print(f"  {label}: {value:.2f}x{target}{verdict}", flush=True)
