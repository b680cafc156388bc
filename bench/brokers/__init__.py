"""PostgreSQL outbox -> RabbitMQ (and NATS JetStream): ours, faststream-outbox, the raw floors.

Everything in one run, on the local servers: per repetition the raw pika floors, then our relay
per item, faststream-outbox at its defaults, our relay with ``--batch`` and faststream-outbox at
its best settings, alternately, each on a fresh database and a fresh durable queue; then NATS
JetStream, ours against nats-py's floor. After the timed runs, a few measured facts: what each
relay does with messages RabbitMQ returns as unroutable, and the delivery mode of the messages
each one left in its queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import fill
from ..common import Plan, Results
from ..postgres import available as postgres_available
from ..postgres import database
from . import jetstream, ours, peer, rabbit

#: Events per timed run: the issue's 20,000 in a full run.
FULL_EVENTS = 20_000
QUICK_EVENTS = 2_000
#: The raw floors' messages: one at a time is slow, and its rate does not depend on the count.
FLOOR_EVENTS = 5_000
WINDOWS = (1, 16, 256)
#: Events of the unroutable runs.
RETURNED_EVENTS = 200
TYPE = "warehouse.stock.added"


def events_for(plan: Plan) -> int:
    return FULL_EVENTS if plan.name == "full" else QUICK_EVENTS


def _event(tag: str, number: int) -> dict[str, Any]:
    return fill.lab_event(f"{tag}-{number:07d}", f"p{number % 64}", 1)


def _body() -> bytes:
    from ackledger.envelope import canonical_json

    return canonical_json(_event("floor", 0)).encode()


def measure(plan: Plan, results: Results, events: int | None = None) -> None:
    print("brokers", flush=True)
    total = events or events_for(plan)
    reps = max(1, plan.reps // 3)
    for section, why in (("brokers", postgres_available()), ("brokers", rabbit.available())):
        if why is not None:
            results.skip(section, why)
            return
    why_peer = peer.ensure()
    if why_peer is not None:
        results.skip("brokers.peer", why_peer)
    for rep in range(reps):
        _rabbit_round(results, rep, total, why_peer is None)
    _facts(results, why_peer is None)
    why_nats = jetstream.available()
    if why_nats is not None:
        results.skip("brokers.nats", why_nats)
    else:
        for rep in range(reps):
            _nats_round(results, rep, total)
    _print_ratios(results)


def _add(results: Results, key: str, label: str, value: float, unit: str = "/s") -> None:
    results.add(key, label, unit, value)
    shown = f"{value:,.0f}/s" if unit == "/s" else f"{value:g} {unit}"
    print(f"  {label}: {shown}", flush=True)


def _rabbit_round(results: Results, rep: int, total: int, with_peer: bool) -> None:
    body = _body()
    count = min(total, FLOOR_EVENTS)
    for window in WINDOWS:
        value = rabbit.floor_rate(body, count, window)
        label = f"RabbitMQ floor: pika, persistent + mandatory, confirms, window {window}"
        _add(results, f"broker.floor.rabbit.w{window}", label, value)
    runs: list[tuple[str, Callable[[], float]]] = [
        ("item", lambda: _ours_rabbit(results, rep, total, batch=False)),
        ("peer.default", lambda: _peer(results, rep, total, peer.DEFAULT)),
        ("batch", lambda: _ours_rabbit(results, rep, total, batch=True)),
        ("peer.best", lambda: _peer(results, rep, total, peer.BEST)),
        ("pipeline", lambda: _ours_rabbit(results, rep, total, batch=True, pipeline=True)),
        ("leased", lambda: _ours_rabbit(results, rep, total, batch=True, leased=True)),
    ]
    for name, run in runs:
        if name.startswith("peer") and not with_peer:
            continue
        run()


def _ours_rabbit(
    results: Results, rep: int, total: int, *, batch: bool, pipeline: bool = False,
    leased: bool = False,
) -> float:  # fmt: skip
    kind = "pipeline" if pipeline else "leased" if leased else "batch" if batch else "item"
    # --pipeline: marks commit on a second connection during the next send; "pipeline" is the
    # single loop's, "leased" the partition relay's (its marks still check the lease).
    extra = ("--single", "--pipeline") if pipeline else ("--pipeline",) if leased else ()
    with database() as source, rabbit.route(f"ours-{kind}") as where:
        fill.pending_events(source, f"r{rep}{kind}", total, _event)
        value = ours.rate(source, where.url(), total, batch, *extra)
        modes = rabbit.facts(where.queue).modes
    flag = (" --batch" if batch else "") + "".join(f" {word}" for word in extra)
    _add(results, f"broker.ours.{kind}", f"ours: `ackledger relay{flag}` -> RabbitMQ", value)
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


def _nats_round(results: Results, rep: int, total: int) -> None:
    body = _body()
    for window in WINDOWS:
        value = jetstream.floor_rate(body, min(total, FLOOR_EVENTS), window)
        _add(results, f"broker.floor.nats.w{window}",
             f"NATS floor: nats-py JetStream publish + PubAck, window {window}", value)  # fmt: skip
    for batch in (False, True):
        kind = "batch" if batch else "item"
        with database() as source, jetstream.stream(f"ours{kind}") as where:
            fill.pending_events(source, f"n{rep}{kind}", total, _event)
            value = ours.rate(source, where.url(), total, batch)
            stored = jetstream.messages(where)
        flag = " --batch" if batch else ""
        _add(results, f"broker.nats.{kind}",
             f"ours: `ackledger relay{flag}` -> NATS JetStream", value)  # fmt: skip
        if stored < total:
            results.notes.append(f"NATS {kind}: the stream holds {stored} of {total} messages")


#: (label, numerator, denominator, goal): the issue's goals, and the ratios worth a look.
RATIOS: tuple[tuple[str, str, str, float | None], ...] = (
    ("ours --batch / faststream-outbox at its defaults", "broker.ours.batch",
     "broker.peer.default", 10.0),
    ("ours --batch / faststream-outbox at its best", "broker.ours.batch", "broker.peer.best", 3.0),
    ("ours --batch / RabbitMQ floor, window 16", "broker.ours.batch", "broker.floor.rabbit.w16",
     0.8),
    ("ours --batch --pipeline / faststream-outbox at its defaults", "broker.ours.leased",
     "broker.peer.default", None),
    ("ours --batch --pipeline / faststream-outbox at its best", "broker.ours.leased",
     "broker.peer.best", None),
    ("ours --batch --pipeline / RabbitMQ floor, window 16", "broker.ours.leased",
     "broker.floor.rabbit.w16", None),
    ("ours --batch --single --pipeline / RabbitMQ floor, window 16", "broker.ours.pipeline",
     "broker.floor.rabbit.w16", None),
    ("ours --batch --single --pipeline / faststream-outbox at its best", "broker.ours.pipeline",
     "broker.peer.best", None),
    ("ours per item / faststream-outbox at its defaults", "broker.ours.item",
     "broker.peer.default", None),
    ("ours per item / faststream-outbox at its best", "broker.ours.item", "broker.peer.best",
     None),
    ("ours per item / RabbitMQ floor, one at a time", "broker.ours.item",
     "broker.floor.rabbit.w1", None),
    ("ours --batch / NATS floor, window 16", "broker.nats.batch", "broker.floor.nats.w16", None),
    ("ours per item / NATS floor, one at a time", "broker.nats.item", "broker.floor.nats.w1",
     None),
)  # fmt: skip


def ratios(results: Results) -> list[tuple[str, float | None, float | None]]:
    """(label, measured ratio or None, goal or None) for every ratio of ``RATIOS``."""
    found: list[tuple[str, float | None, float | None]] = []
    for label, top, bottom, goal in RATIOS:
        a, b = results.get(top), results.get(bottom)
        value = a / b if a is not None and b and not math.isnan(a) else None
        found.append((label, value, goal))
    return found


def _print_ratios(results: Results) -> None:
    for label, value, goal in ratios(results):
        if value is None:
            continue
        verdict = "" if goal is None else (" met" if value >= goal else " NOT met")
        target = "" if goal is None else f" (goal >= {goal:g})"
        print(f"  {label}: {value:.2f}x{target}{verdict}", flush=True)
