"""``python -m bench.wakeup [--samples N] [--poll S]``: idle-to-sent latency of one event on
PostgreSQL, with LISTEN/NOTIFY and polling only.

A real ``ackledger relay`` process (the leasing relay, PostgreSQL's default; ``--single`` for
the single loop) with its default poll interval, a real ``serve sink`` (SQLite, FULL), and
this process publishing one event at a time, each after a random idle pause so that it lands
at a random point of the relay's poll. The latency of a sample is the sink's receipt time
(``first_received_at``, the sink's clock) minus the moment ``publish`` returned (the same
machine's clock): the event was committed, and this is how long it sat before it was applied.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from pathlib import Path

from ackledger import Inbox, Outbox
from ackledger._dev.procs import start_service
from ackledger.store.postgres.tx import PostgresTx

from .common import percentile, scratch
from .fill import lab_event
from .postgres import available, database
from .relay import start_sink


def _receipt_time(sink_db: Path, event_id: str, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    with Inbox(sink_db) as inbox:
        while time.monotonic() < deadline:
            found = inbox.receipt(event_id)
            if found is not None:
                return float(found["first_received_at"])
            time.sleep(0.005)
    raise RuntimeError(f"{event_id} not applied within {timeout} s")


def latencies(
    folder: Path, *, listen: bool, samples: int, poll: float, single: bool, rng: random.Random
) -> list[float]:
    tag = "listen" if listen else "poll"
    sink = start_sink(folder, f"sink-{tag}")
    try:
        with database() as url:
            Outbox(url).close()  # the schema, before the relay starts
            args = ["relay", "--source", url, "--to", sink.base_url + "/events"]
            args += ["--poll-interval", str(poll), "--metrics-port", "0"]
            args += [] if listen else ["--no-listen"]
            args += ["--single"] if single else ["--owner", f"bench-{tag}"]
            relay = start_service(args, stderr_path=folder / f"relay-{tag}.log")
            try:
                found: list[float] = []
                with Outbox(url) as outbox:
                    time.sleep(1.0)  # its first look is over: idle
                    for n in range(samples):
                        time.sleep(poll * (0.5 + rng.random()))
                        event_id = f"{tag}-{n}"
                        outbox.publish(lab_event(event_id, "pen", 1))
                        committed = time.time()
                        applied = _receipt_time(folder / f"sink-{tag}.db", event_id)
                        found.append(applied - committed)
                return found
            finally:
                relay.stop()
    finally:
        sink.stop()


def publish_rate(url: str, threads: int, seconds: float, tag: str) -> float:
    """Events per second that ``threads`` producers publish, each in its own transaction."""
    counts = [0] * threads
    with Outbox(url) as outbox:
        deadline = time.perf_counter() + seconds

        def produce(number: int) -> None:
            while time.perf_counter() < deadline:
                outbox.publish(lab_event(f"{tag}-{number}-{counts[number]}", "pen", 1))
                counts[number] += 1

        workers = [threading.Thread(target=produce, args=(n,)) for n in range(threads)]
        began = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return sum(counts) / (time.perf_counter() - began)


def notify_cost(threads: int, seconds: float, rounds: int) -> tuple[float, float]:
    """Publishes per second with the NOTIFY and, as the peer, without it (bench only: the
    store's ``outbox_wake`` emptied for the run), interleaved ``rounds`` times; medians."""
    with_notify: list[float] = []
    without: list[float] = []
    original = PostgresTx.outbox_wake
    with database() as url:
        for n in range(rounds):
            with_notify.append(publish_rate(url, threads, seconds, f"n{n}"))
            PostgresTx.outbox_wake = lambda self: None  # type: ignore[method-assign]
            try:
                without.append(publish_rate(url, threads, seconds, f"q{n}"))
            finally:
                PostgresTx.outbox_wake = original  # type: ignore[method-assign]
    return statistics.median(with_notify), statistics.median(without)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeup", description=__doc__)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--poll", type=float, default=0.5, help="the relay's poll interval")
    parser.add_argument("--single", action="store_true", help="the single loop (--single)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--publishers", type=int, default=8, help="producer threads for the NOTIFY's cost"
    )
    args = parser.parse_args(argv)
    missing = available()
    if missing is not None:
        print(f"skipped: {missing}")
        return 1
    rng = random.Random(args.seed)
    kind = "single loop" if args.single else "leasing relay"
    print(
        f"idle-to-sent latency, one event at a time, {args.samples} samples, {kind}, "
        f"poll {args.poll:g} s (PostgreSQL outbox, SQLite FULL sink)"
    )
    figures: dict[str, tuple[float, float]] = {}
    with scratch("wakeup") as folder:
        for listen in (True, False):
            found = latencies(
                folder, listen=listen, samples=args.samples, poll=args.poll, single=args.single,
                rng=rng,
            )  # fmt: skip
            p50, p99 = 1000 * percentile(found, 50), 1000 * percentile(found, 99)
            figures["listen" if listen else "poll"] = (p50, p99)
            name = "LISTEN/NOTIFY" if listen else "polling only (--no-listen)"
            worst = 1000 * max(found)
            print(f"  {name:<28} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   max {worst:8.1f} ms")
    (lp50, lp99), (pp50, pp99) = figures["listen"], figures["poll"]
    print(f"  ratio polling/LISTEN: p50 {pp50 / lp50:.1f}x, p99 {pp99 / lp99:.1f}x")
    notified, quiet = notify_cost(args.publishers, 3.0, 3)
    print(
        f"publish, {args.publishers} producer threads, a transaction each: {notified:,.0f}/s "
        f"with the NOTIFY, {quiet:,.0f}/s without it (ratio {notified / quiet:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
