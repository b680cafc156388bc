"""The seeded kill -9 campaign through a real broker: ``python -m bench.broker_campaign
--broker amqp|nats [--schedules 20] [--events 500] [--first-seed 1] [--seed N]
[--leased-pipeline | --leased-inflight N]``.

One schedule: a SQLite outbox fed with EVENTS lab orders while ``ackledger relay --batch
--inflight 1`` (one batch at a time) publishes them to the broker and ``ackledger consume``
applies them into a SQLite inbox; the relay, the consumer or both are killed with SIGKILL at the
points the seed draws (a consumer after a time, a relay after a number of further marks: while
it is at work), and started again at once. Then both run until the outbox is drained and the
inbox holds every event, the consumer is stopped with SIGTERM and everything is read back from
other connections:

- lost: marked sent in the outbox, never applied; stuck: still pending, or left in the broker;
- double-applied: an order whose stock moved more than once (each order adds 1 to its own sku);
  these three are judged by ``ackledger verify``'s own judge (``ackledger.ops.verify.judge``);
- re-sends: publishes beyond one per event, seen by the route's tap (``bench.broker_routes``). At
  each relay kill the events the tap had seen that are still pending are counted ("in
  flight"): they are what the next relay publishes again. No kill may leave more than the one
  batch in flight, and the re-sends cannot exceed what the kills left in flight.

``--leased-pipeline``: the outbox is a fresh PostgreSQL database instead and the relay runs
``--batch --pipeline`` on leased partitions (a batch's marks committed on a second connection
while the next batch is sent; leases of 3 s, so that a killed relay's partition is free again
soon): a kill may then leave two batches in flight, the one being sent and the one whose marks
were being committed.

``--leased-inflight N``: the same PostgreSQL outbox and leases, the relay running ``--batch
--inflight N`` (up to N batches published before the oldest one's confirms are awaited): a kill
may leave all N batches in flight, so the bound is N x 16.

The schedule (kill points and targets) is drawn from the seed alone, so ``--seed N`` replays it;
where a kill lands in the work is up to the machine. The test suite runs a small version
(tests/test_broker_campaign.py); this runs the full one and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ackledger import Inbox, Outbox, new_event
from ackledger.ops.processes import Child
from ackledger.ops.verify.judge import judge, read_sides

from .broker_routes import BROKERS, Route, open_route
from .common import scratch
from .postgres import database

LIMIT = 16  # the relay's batch: the most one kill may leave in flight
TARGETS = ("relay", "consumer", "both")
FEED_CHUNK = 4 * LIMIT  # bursts of several batches: a kill after a mark finds more to send
DRAIN_S = 90.0
RELAY_PATIENCE_S = 10.0
CONSUMING = "INFO    consuming:"
BACKOFF = ("--base-backoff", "0.05", "--max-backoff", "0.5")
#: The relay's flags and the most one kill may leave in flight, per kind of relay.
PLAIN = (("--batch", "--inflight", "1"), LIMIT)
LEASED_PIPELINE = (("--batch", "--pipeline", "--lease-ttl", "3"), 2 * LIMIT)


def leased_inflight(n: int) -> tuple[tuple[str, ...], int]:
    """``--leased-inflight N``: the relay's flags and its bound, N batches."""
    return ("--batch", "--inflight", str(n), "--lease-ttl", "3"), n * LIMIT


@dataclass(frozen=True)
class Kill:
    after_s: float  # at the latest this long after the previous kill (the first: the start)
    target: str
    #: A kill of the relay comes as soon as it has marked this many more events: it lands
    #: while the relay is at work, where a time alone would often find it idle or starting.
    after_marks: int


def schedule(seed: int) -> list[Kill]:
    """The kills of one schedule, from its seed alone."""
    rng = random.Random(seed)
    return [
        Kill(round(rng.uniform(0.5, 2.0), 3), rng.choice(TARGETS), rng.randint(1, 4 * LIMIT))
        for _ in range(rng.randint(3, 6))
    ]


@dataclass
class Outcome:
    broker: str
    seed: int
    events: int
    relay_kills: int = 0
    consumer_kills: int = 0
    lost: int = 0
    double_applied: int = 0
    stuck: int = 0
    #: Per relay kill: events published (seen by the tap) and not marked when it died.
    in_flight: list[int] = field(default_factory=list)
    resends: int = 0
    #: Messages the consumer's inbox absorbed as duplicates (re-sends and redeliveries).
    inbox_duplicates: int = 0
    consumer_exit: int | None = None
    seconds: float = 0.0
    #: The most one relay kill may leave in flight (one batch; two behind ``--pipeline``).
    bound: int = LIMIT

    @property
    def problems(self) -> list[str]:
        counts = {"lost": self.lost, "double-applied": self.double_applied, "stuck": self.stuck}
        found = [f"{name} {value}" for name, value in counts.items() if value]
        if self.in_flight and max(self.in_flight) > self.bound:
            found.append(f"a kill left {max(self.in_flight)} in flight, more than {self.bound}")
        if self.resends > sum(self.in_flight):
            found.append(f"{self.resends} re-sends, more than the {sum(self.in_flight)} in flight")
        if self.consumer_exit != 0:
            found.append(f"the consumer exited {self.consumer_exit} on SIGTERM")
        return found


def _read(db: Path | str, sql: str) -> list[tuple[object, ...]]:
    """One query on a connection of its own, read-only: what is on disk now."""
    if str(db).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as pg:
            return list(pg.execute(sql).fetchall())
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def pending_ids(source: Path | str) -> set[str]:
    return {str(row[0]) for row in _read(source, "SELECT id FROM ackledger_outbox WHERE sent = 0")}


def stock_by_order(sink: Path) -> dict[str, int]:
    try:
        rows = _read(sink, "SELECT sku, qty FROM inventory")
    except sqlite3.OperationalError:  # no file or no table yet: the consumer is starting
        return {}
    return {str(sku).removeprefix("sku-"): int(str(qty)) for sku, qty in rows}


ORDER_PREFIX = "c-"


def order_id(n: int) -> str:
    return f"{ORDER_PREFIX}{n:05d}"


def _feed(source: Path | str, events: int, seconds: float) -> None:
    """Write the orders in transactions of FEED_CHUNK, spread over ``seconds``, as producers
    would; fast enough that the relay mostly has a backlog to work through."""
    chunks = max(1, -(-events // FEED_CHUNK))
    with Outbox(source) as outbox:
        for first in range(0, events, FEED_CHUNK):
            with outbox.transaction() as tx:
                for n in range(first, min(events, first + FEED_CHUNK)):
                    tx.publish(order(n, outbox.source))
            time.sleep(seconds / chunks)


def order(n: int, source: str) -> dict[str, object]:
    """Order n: one unit of its own sku (its id), so a second application shows as 2."""
    data = {"sku": order_id(n), "qty": 1}
    return new_event("warehouse.stock.added", data, source=source, id=order_id(n))


def run_schedule(
    broker: str,
    seed: int,
    events: int,
    workdir: Path,
    *,
    leased_pipeline: bool = False,
    inflight: int = 1,
) -> Outcome:
    kills = schedule(seed)
    flags: tuple[str, ...]
    flags, bound = LEASED_PIPELINE if leased_pipeline else PLAIN
    if inflight > 1:
        flags, bound = leased_inflight(inflight)
    leased = leased_pipeline or inflight > 1
    outcome = Outcome(broker, seed, events, bound=bound)
    sink = workdir / "sink.db"
    started = time.perf_counter()
    with contextlib.ExitStack() as stack, open_route(broker) as route:
        source: Path | str = stack.enter_context(database()) if leased else (
            workdir / "source.db"
        )  # fmt: skip
        Outbox(source).close()  # made before the relay opens it
        relay_args = ["relay", "--source", str(source), "--to", route.relay_url, *flags,
                      "--limit", str(LIMIT), "--poll-interval", "0.05", "--timeout", "2",
                      "--seed", str(seed), *BACKOFF]  # fmt: skip
        consume_args = ["consume", "--from", route.consume_url, "--db", str(sink), *BACKOFF]

        starts = itertools.count()

        def relay() -> Child:
            return Child(relay_args, workdir / f"relay-{next(starts)}.log")

        def consumer() -> Child:
            return Child(consume_args, workdir / f"consume-{next(starts)}.log")

        relays, consumers = relay(), consumer()
        feeder = threading.Thread(
            target=_feed, args=(source, events, 0.6 * sum(k.after_s for k in kills)), daemon=True
        )
        feeder.start()
        try:
            for kill in kills:
                _wait_for(kill, source, events)
                if kill.target in ("relay", "both"):
                    relays.kill()
                    outcome.relay_kills += 1
                    outcome.in_flight.append(_in_flight(route, source))
                    relays = relay()
                if kill.target in ("consumer", "both"):
                    consumers.kill()
                    outcome.consumer_kills += 1
                    consumers = consumer()
            feeder.join()
            _drain(source, sink, events, route)
            # A consumer started by the last kill may still be importing: SIGTERM would end
            # it before its handler is in, which is not the exit being tested.
            consumers.wait_for(CONSUMING)
            outcome.consumer_exit = consumers.stop()
        finally:
            relays.stop()
            consumers.stop()
        _judge(outcome, route, source, sink)
    outcome.seconds = time.perf_counter() - started
    return outcome


def sent_count(source: Path | str) -> int:
    return int(str(_read(source, "SELECT count(*) FROM ackledger_outbox WHERE sent = 1")[0][0]))


def _wait_for(kill: Kill, source: Path | str, events: int) -> None:
    """A consumer's kill comes after its time; a relay's once it has marked its count more
    (a relay takes a second or more to start on a loaded machine, so a time alone would
    mostly find it importing), or when nothing is left to mark, or after a safety bound."""
    if kill.target == "consumer":
        time.sleep(kill.after_s)
        return
    time.sleep(kill.after_s / 4)
    end = time.monotonic() + kill.after_s + RELAY_PATIENCE_S
    enough = min(events, sent_count(source) + kill.after_marks)
    while time.monotonic() < end and sent_count(source) < enough:
        time.sleep(0.005)


def _in_flight(route: Route, source: Path | str) -> int:
    seen = route.seen_settled()
    return sum(1 for event_id in pending_ids(source) if seen[event_id] > 0)


def _drain(source: Path | str, sink: Path, events: int, route: Route) -> None:
    """Until nothing is pending, every order was applied and the broker holds nothing the
    consumer has not acked: a re-send after a relay's kill may reach the queue after its
    first copy was applied, and is consumed (as a duplicate) only later. Stopping the
    consumer before that would count it as left in the broker, stuck, which it is not."""
    end = time.monotonic() + DRAIN_S
    while time.monotonic() < end:
        if not pending_ids(source) and len(stock_by_order(sink)) >= events and not route.left():
            return
        time.sleep(0.1)


def _judge(outcome: Outcome, route: Route, source: Path | str, sink: Path) -> None:
    # The judge of ``ackledger verify``: each order is a sku of its own whose stock says how
    # often it was applied. Its "reordered" is not asked: a broker redelivers a killed
    # consumer's messages after newer ones, and order across a redelivery is not promised.
    counts = judge(read_sides(str(source), str(sink), ORDER_PREFIX), outcome.events)
    outcome.lost, outcome.double_applied = counts.lost, counts.double_applied
    outcome.stuck = counts.stuck + route.left()
    seen = route.seen_settled()
    outcome.resends = sum(count - 1 for count in seen.values() if count > 1)
    with Inbox(sink) as inbox:
        outcome.inbox_duplicates = inbox.counters()["duplicate"]


HEADER = (
    f"{'broker':<6} {'seed':>5} {'events':>6} {'kills r/c':>9} {'lost':>5} {'double':>6} "
    f"{'stuck':>5} {'re-sends':>8} {'max/kill':>8} {'inbox dup':>9} {'s':>6}"
)


def row(o: Outcome) -> str:
    kills = f"{o.relay_kills}/{o.consumer_kills}"
    most = max(o.in_flight, default=0)
    return (
        f"{o.broker:<6} {o.seed:>5} {o.events:>6} {kills:>9} {o.lost:>5} {o.double_applied:>6} "
        f"{o.stuck:>5} {o.resends:>8} {most:>8} {o.inbox_duplicates:>9} {o.seconds:>6.1f}"
    )


def campaign(
    broker: str,
    seeds: list[int],
    events: int,
    *,
    leased_pipeline: bool = False,
    inflight: int = 1,
) -> list[Outcome]:
    outcomes = []
    print(HEADER, flush=True)
    for seed in seeds:
        with scratch(f"campaign-{broker}-{seed}") as workdir:
            outcome = run_schedule(
                broker, seed, events, workdir, leased_pipeline=leased_pipeline, inflight=inflight
            )
            if outcome.problems:
                _keep_logs(workdir, broker, seed)
        outcomes.append(outcome)
        print(row(outcome) + ("  " + "; ".join(outcome.problems) if outcome.problems else ""),
              flush=True)  # fmt: skip
    return outcomes


def _keep_logs(workdir: Path, broker: str, seed: int) -> None:
    kept = Path(tempfile.gettempdir()) / f"ackledger-campaign-{broker}-{seed}"
    kept.mkdir(parents=True, exist_ok=True)
    for log in workdir.glob("*.log"):
        (kept / log.name).write_bytes(log.read_bytes())
    print(f"  logs of seed {seed} kept in {kept}", file=sys.stderr)


def summary(outcomes: list[Outcome]) -> str:
    kills = sum(o.relay_kills for o in outcomes)
    most = max((max(o.in_flight, default=0) for o in outcomes), default=0)
    resends = sum(o.resends for o in outcomes)
    bound = max((o.bound for o in outcomes), default=LIMIT)
    return (
        f"{len(outcomes)} schedules x {outcomes[0].events if outcomes else 0} events: "
        f"lost {sum(o.lost for o in outcomes)}, "
        f"double-applied {sum(o.double_applied for o in outcomes)}, "
        f"stuck {sum(o.stuck for o in outcomes)}; {kills} relay kills and "
        f"{sum(o.consumer_kills for o in outcomes)} consumer kills; {resends} re-sends "
        f"(at most {most} after one kill, batch {LIMIT}, bound {bound}); "
        f"{sum(o.inbox_duplicates for o in outcomes)} duplicates absorbed by the inbox"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_campaign", description=__doc__)
    parser.add_argument("--broker", choices=BROKERS, required=True)
    parser.add_argument("--schedules", type=int, default=20)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seed", type=int, help="replay this one schedule")
    parser.add_argument("--leased-pipeline", action="store_true",
                        help="PostgreSQL outbox, relay --batch --pipeline")  # fmt: skip
    parser.add_argument("--leased-inflight", type=int, default=1, metavar="N",
                        help="PostgreSQL outbox, relay --batch --inflight N (N x 16)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.events < 1:
        parser.error("--schedules and --events: 1 or more")
    if not 1 <= args.leased_inflight <= 16 or (args.leased_inflight > 1 and args.leased_pipeline):
        parser.error("--leased-inflight: 1-16, and not with --leased-pipeline")
    seeds = (
        [args.seed]
        if args.seed is not None
        else list(range(args.first_seed, args.first_seed + args.schedules))
    )
    outcomes = campaign(args.broker, seeds, args.events, leased_pipeline=args.leased_pipeline,
                        inflight=args.leased_inflight)  # fmt: skip
    print(summary(outcomes), flush=True)
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
