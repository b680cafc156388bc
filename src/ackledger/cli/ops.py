"""Operating commands: relay, status, trace, quarantine, requeue, quarantined, purge."""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from types import FrameType
from typing import Any, TypeVar

from .._core.backoff import Backoff
from .._core.logline import FORMATS, install
from ..errors import AckledgerError, InvalidEvent, NotAcknowledged
from ..event import check_identifier
from ..ops.probe import base_url, scrape
from ..ops.trace import trace, when
from ..relay.leases import check_owner, default_owner
from ..relay.loop import (
    EXIT_POISON,
    PERMANENT,
    POISON_POLICIES,
    Failure,
    Relay,
    RelayCounts,
    RelaySettings,
    failure_class,
    refusal_of,
)
from ..relay.loop import logger as relay_logger
from ..source.dispatch import MARK_SYNCS
from ..source.outbox import Outbox
from ..store import is_postgres, shown
from ..wire.http import post_batch, send_http
from ..wire.targets import check_target
from .common import (
    add_http_client,
    add_source,
    add_synchronous,
    duration_arg,
    limit_arg,
    open_outbox,
    port_arg,
    positive_float,
)

T = TypeVar("T")


def _seed_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    relay = commands.add_parser(
        "relay",
        help="the long-running relay: send what is pending, back off on failures",
        description="Send pending events in order, marking each only on its exact ACK; poll "
        "when idle; wait out transient failures (no connection, time-out, 5xx) with capped, "
        "jittered exponential backoff; alert on a permanent one (a 4xx from the sink, but "
        "408, 425 and 429) and stop (exit 3) or quarantine it. SIGTERM/SIGINT: finish the send "
        "in flight, exit 0.",
    )
    add_source(relay)
    relay.add_argument("--to", required=True, metavar="URL", help="http://HOST:PORT/events")
    relay.add_argument("--batch", action="store_true", help="send each selection in one request")
    relay.add_argument(
        "--pipeline", action="store_true",
        help="with --batch: commit a batch's marks on a second connection while the next "
        "batch is sent (single loop only)",
    )  # fmt: skip
    relay.add_argument("--limit", type=limit_arg, default=16, help="events per round, 1-16")
    relay.add_argument(
        "--mark-sync", choices=MARK_SYNCS, default="each",
        help="one event a request: fsync every mark (each, default) or only the last of each "
        "round (last: one fsync per round; marks lost to a power cut are re-sent as duplicates)",
    )  # fmt: skip
    relay.add_argument(
        "--base-backoff", type=positive_float, default=0.1, metavar="SECONDS",
        help="first backoff ceiling (default 0.1)",
    )  # fmt: skip
    relay.add_argument(
        "--max-backoff", type=positive_float, default=30.0, metavar="SECONDS",
        help="backoff cap (default 30)",
    )  # fmt: skip
    relay.add_argument("--seed", type=_seed_arg, help="seed the jitter (reproducible waits)")
    relay.add_argument(
        "--poll-interval", type=positive_float, default=0.5, metavar="SECONDS",
        help="wait between looks when nothing is pending (default 0.5)",
    )  # fmt: skip
    relay.add_argument(
        "--on-poison", choices=POISON_POLICIES, default="stop",
        help="on a permanent failure: stop (default, exit 3) or quarantine it and go on",
    )  # fmt: skip
    relay.add_argument("--metrics-port", type=port_arg, metavar="N", help="serve /metrics here")
    relay.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)"
    )
    relay.add_argument("--log-format", choices=FORMATS, default="text", help="text or json")
    add_http_client(relay)
    lease = relay.add_argument_group(
        "PostgreSQL: one of N relays",
        "With a postgresql:// source the relay leases partitions (the event's sku by default) "
        "so that several relays can run at once: order is kept within each partition, not "
        "across them, and a failure stops only its partition.",
    )
    lease.add_argument(
        "--owner", metavar="NAME",
        help="this relay's name in lease rows, unique among running relays "
        "(default: $POD_NAME, else HOSTNAME-PID)",
    )  # fmt: skip
    lease.add_argument(
        "--lease-ttl", type=positive_float, default=30.0, metavar="SECONDS",
        help="how long a lease lasts unrenewed; a crashed relay's partitions wait this long "
        "(default 30)",
    )  # fmt: skip
    lease.add_argument(
        "--single", action="store_true",
        help="run the single loop instead (one global order; run only one such relay)",
    )  # fmt: skip
    add_synchronous(relay)
    relay.set_defaults(handler=cmd_relay)

    status = commands.add_parser(
        "status",
        help="what to watch: pending, oldest pending age, attempts, quarantined, sent",
        description="Outbox figures, and the counters of a sink or ledger service if given.",
    )
    add_source(status)
    status.add_argument("--sink", metavar="URL", help="a sink service, http://HOST:PORT")
    status.add_argument("--ledger", metavar="URL", help="a ledger service, http://HOST:PORT")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=cmd_status)

    tracer = commands.add_parser(
        "trace",
        help="the evidence for one event at every stage",
        description="One row per stage (accepted, outbox, sink, ack, sent): what was seen, "
        "where, and what cannot be known. Reads only.",
    )
    tracer.add_argument("event_id", metavar="EVENT_ID")
    add_source(tracer)
    tracer.add_argument(
        "--sink",
        required=True,
        metavar="PATH_OR_URL",
        help="the sink's database (SQLite file or postgresql:// URL) or service URL",
    )
    tracer.add_argument("--json", action="store_true", help="print JSON")
    tracer.set_defaults(handler=cmd_trace)

    quarantine = commands.add_parser(
        "quarantine",
        help="take a pending event out of pending (never counted as sent)",
        description="Hold a pending event out of pending with a reason; the events behind it "
        "go on. Unknown id or an event that is not pending: exit 2.",
    )
    quarantine.add_argument("event_id", metavar="EVENT_ID")
    add_source(quarantine)
    quarantine.add_argument("--reason", required=True, help="why (kept with the event)")
    quarantine.set_defaults(handler=cmd_quarantine)

    requeue = commands.add_parser(
        "requeue",
        help="put a quarantined event back into pending at its seq",
        description="Put a quarantined event back at its original seq and record which later "
        "events were marked sent while it was out (the reorder).",
    )
    requeue.add_argument("event_id", metavar="EVENT_ID")
    add_source(requeue)
    requeue.set_defaults(handler=cmd_requeue)

    listing = commands.add_parser("quarantined", help="list quarantined events with reasons")
    add_source(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=cmd_quarantined)

    purge = commands.add_parser(
        "purge",
        help="delete sent outbox rows older than a duration",
        description="Delete sent rows sent longer ago than DURATION (e.g. 7d, 12h, 30m). "
        "Pending and quarantined rows are never deleted.",
    )
    add_source(purge)
    purge.add_argument(
        "--sent-older-than", required=True, type=duration_arg, metavar="DURATION",
        help="e.g. 7d, 12h, 30m, 45s",
    )  # fmt: skip
    purge.set_defaults(handler=cmd_purge)


# --- relay ---------------------------------------------------------------------------------


def cmd_relay(args: argparse.Namespace) -> int:
    from . import UsageError

    # Everything that can be refused is refused before the database is opened.
    if args.pipeline and not args.batch:
        raise UsageError("--pipeline: needs --batch (only batch rounds overlap their marks)")
    settings = RelaySettings(
        url=args.to,
        batch=args.batch,
        limit=args.limit,
        poll_interval=args.poll_interval,
        on_poison=args.on_poison,
        timeout=args.timeout,
        mark_sync=args.mark_sync,
        pipeline=args.pipeline,
        allowed_hosts=tuple(args.allow_host),
    )
    rng = random.Random(args.seed) if args.seed is not None else None
    try:
        backoff = Backoff(args.base_backoff, args.max_backoff, rng=rng)
    except ValueError as exc:
        raise UsageError(f"--max-backoff: {exc}") from None
    install(relay_logger, args.log_format)
    partitioned = is_postgres(args.source) and not args.single
    owner = check_owner(args.owner or default_owner()) if partitioned else None
    if settings.pipeline and owner is not None:
        raise UsageError("--pipeline: only the single loop overlaps marks (SQLite, or --single)")
    with open_outbox(args.source, args.synchronous) as outbox:
        if owner is not None:
            return _relay_partitions(args, settings, outbox, owner)
        marker = open_outbox(args.source, args.synchronous) if settings.pipeline else None
        try:
            relay = Relay(outbox, settings, backoff, marker=marker)
            return _run_relay(args, outbox, relay)
        finally:
            if marker is not None:
                marker.close()


def _serving(
    args: argparse.Namespace,
    outbox: Outbox,
    counts: RelayCounts,
    stop: Callable[[], None],
    run: Callable[[], T],
) -> T:
    """``run()`` with /metrics up (if asked) and SIGTERM/SIGINT calling ``stop``."""
    metrics = _metrics(args, outbox, counts)
    restore = _on_stop_signals(stop)
    try:
        return run()
    finally:
        restore()
        if metrics is not None:
            metrics.close()


def _run_relay(args: argparse.Namespace, outbox: Outbox, relay: Relay) -> int:
    code = _serving(args, outbox, relay.counts, relay.request_stop, relay.run)
    if relay.poisoned is not None:
        print(
            f"ackledger relay: stopped on poison event {relay.poisoned.event_id}: "
            f"{relay.poisoned.message}; see `ackledger trace {relay.poisoned.event_id} "
            f"--source {shown(args.source)} --sink {base_url(args.to)}`",
            file=sys.stderr,
        )
    return code


def _metrics(args: argparse.Namespace, outbox: Outbox, counts: RelayCounts) -> Any:
    """Start the relay's /metrics endpoint if asked; returns it (or None) to close later."""
    from . import UsageError

    if args.metrics_port is None:
        return None
    from ..relay.metrics import MetricsServer

    try:
        metrics = MetricsServer(outbox.stats, counts, args.metrics_host, args.metrics_port)
    except OSError as exc:
        raise UsageError(f"--metrics-port: cannot listen: {exc}") from None
    print(f"ackledger relay metrics listening on {metrics.url}", flush=True)
    return metrics


class PartitionSends:
    """The sends of a partition relay and how their failures are judged: ``send`` or
    ``send_batch`` for the worker, ``classify`` and ``describe`` for its failures."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        #: The item the last batch answer refused, with the sink's reason (``refusal_of``).
        self.refusal: Failure | None = None

    def send(self, event: dict[str, Any]) -> bool:
        settings = self.settings
        return send_http(event, settings.url, timeout=settings.timeout,
                         allowed_hosts=settings.allowed_hosts)  # fmt: skip

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        # Forget the last answer first: a send that raises (no connection, a 5xx) must be
        # classified by its own failure, never by an earlier batch's refusal.
        self.refusal = None
        settings = self.settings
        answer = post_batch(events, settings.url + "/batch", timeout=settings.timeout,
                            allowed_hosts=settings.allowed_hosts)  # fmt: skip
        self.refusal = refusal_of(events, answer)
        return answer.acked

    def classify(self, exc: Exception) -> str:
        if isinstance(exc, InvalidEvent):
            return PERMANENT
        if not isinstance(exc, NotAcknowledged):
            return failure_class(None)  # no answer (connection, time-out) or the database
        # A batch the sink refused part of ends in NotAcknowledged, raised right after the
        # send that recorded the refusal.
        if self.refusal is not None:
            return self.refusal.kind
        return failure_class(exc.status)

    def describe(self, exc: Exception) -> str:
        if self.refusal is not None and isinstance(exc, NotAcknowledged):
            return self.refusal.message
        return f"{type(exc).__name__}: {exc}"


def _relay_partitions(
    args: argparse.Namespace, settings: RelaySettings, outbox: Outbox, owner: str
) -> int:
    """One of N relays on a PostgreSQL outbox: the partition worker, with the relay's poison
    policy, stop signals and metrics."""
    from ..relay.partitions import PartitionWorker

    sends = PartitionSends(settings)
    send, send_batch = sends.send, sends.send_batch
    classify, describe = sends.classify, sends.describe

    stop = threading.Event()
    worker = PartitionWorker(
        outbox, owner=owner, send=None if settings.batch else send,
        send_batch=send_batch if settings.batch else None, lease_ttl=args.lease_ttl,
        limit=settings.limit, stop=stop, idle_wait=settings.poll_interval,
        base_backoff=args.base_backoff, max_backoff=args.max_backoff,
        rng=random.Random(args.seed) if args.seed is not None else None,
        classify=classify, describe=describe, on_poison=settings.on_poison,
        mark_sync=settings.mark_sync,
    )  # fmt: skip
    report = _serving(args, outbox, worker.counts, stop.set, worker.run)
    print(json.dumps(asdict(report)), flush=True)
    if report.poisoned is not None:
        print(f"ackledger relay: stopped on poison event {report.poisoned}", file=sys.stderr)
        return EXIT_POISON
    return 0


def _on_stop_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Make SIGTERM and SIGINT request a stop (never interrupt); returns the undo."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()  # only a flag: the relay looks at it between sends

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


# --- status --------------------------------------------------------------------------------

_SERVICE_PREFIX = {"sink": "ackledger_sink_", "ledger": "ackledger_ledger_"}


def _counters(role: str, url: str) -> dict[str, Any]:
    try:
        samples = scrape(url)
    except (OSError, AckledgerError) as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
    prefix = _SERVICE_PREFIX[role]
    shown: dict[str, Any] = {"url": url}
    for name, value in sorted(samples.items()):
        if name.startswith(prefix):
            shown[name[len(prefix) :]] = int(value) if value.is_integer() else value
    return shown


def cmd_status(args: argparse.Namespace) -> int:
    services = {role: getattr(args, role) for role in ("sink", "ledger")}
    for role, url in services.items():
        if url is not None:
            services[role] = base_url(url)
            check_target(services[role] + "/metrics", "/metrics")  # refuse before reading
    with open_outbox(args.source) as outbox:
        report: dict[str, Any] = outbox.stats()
        outbox_location = outbox.backend.location
    for role, url in services.items():
        if url is not None:
            report[role] = _counters(role, url)
    if args.json:
        print(json.dumps(report))
        return 0
    error = report["last_error"]
    rows = [
        ("pending", report["pending"]),
        ("oldest pending age", f"{report['oldest_pending_age_s']:.1f} s"),
        ("attempts", report["attempts"]),
        ("sent", report["sent"]),
        ("quarantined", report["quarantined"]),
        ("purged", report["purged"]),
        ("last error", f"{error['id']} at {when(error['at'])}: {error['error']}" if error else "-"),
    ]
    print(f"outbox  {outbox_location}")
    for label, value in rows:
        print(f"  {label:<20} {value}")
    for role in ("sink", "ledger"):
        if role in report:
            print(f"{role:<7} {report[role]['url']}")
            for label, value in report[role].items():
                if label != "url":
                    print(f"  {label:<20} {value}")
    return 0


# --- trace ---------------------------------------------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    from .common import existing_target, is_url

    check_identifier(args.event_id, "EVENT_ID", 128)
    if is_url(args.sink) and not is_postgres(args.sink):
        check_target(base_url(args.sink) + "/events", "/events")
    existing_target(args.source)
    report = trace(args.event_id, args.source, args.sink)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"trace of {report['id']}")
    print(f"{'stage':<9} {'seen':<9} {'state':<28} where")
    for stage in report["stages"]:
        print(f"{stage['stage']:<9} {stage['seen']:<9} {stage['state']:<28} {stage['where']}")
        print(f"{'':<19} {stage['detail']}")
    print(f"verdict: {report['verdict']}")
    return 0


# --- quarantine, requeue, quarantined, purge ------------------------------------------------


def cmd_quarantine(args: argparse.Namespace) -> int:
    check_identifier(args.event_id, "EVENT_ID", 128)
    if not args.reason.strip():
        raise ValueError("--reason: must say why")
    with open_outbox(args.source) as outbox:
        seq = outbox.quarantine(args.event_id, args.reason)
    print(
        f"quarantined {args.event_id} (seq {seq}): {args.reason.strip()}; it is not sent and not "
        f"counted as sent; `ackledger requeue {args.event_id}` puts it back"
    )
    return 0


def cmd_requeue(args: argparse.Namespace) -> int:
    check_identifier(args.event_id, "EVENT_ID", 128)
    with open_outbox(args.source) as outbox:
        record = outbox.requeue(args.event_id)
    print(f"requeued {record['id']} at seq {record['seq']}")
    if record["overtaken_count"]:
        print(
            f"reorder: {record['overtaken_count']} later event(s) were marked sent while it was "
            f"out: {', '.join(record['overtaken_by'])}"
        )
    else:
        # Said as what the outbox shows: a later event purged since, or one the sink applied
        # whose ACK was lost (not marked), is not seen here.
        print("no later event of this outbox was marked sent while it was out")
    return 0


def cmd_quarantined(args: argparse.Namespace) -> int:
    with open_outbox(args.source) as outbox:
        rows = outbox.quarantined()
    if args.json:
        print(json.dumps(rows))
    elif not rows:
        print("nothing quarantined")
    else:
        print(f"{'seq':>8}  {'id':<32} {'quarantined at':<20}  reason")
        for row in rows:
            at = when(row["quarantined_at"])
            print(f"{row['seq']:>8}  {row['id']:<32} {at:<20}  {row['reason']}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    seconds = args.sent_older_than
    with open_outbox(args.source) as outbox:
        count = outbox.purge(seconds)
    print(
        f"purged {count} sent row(s) sent before {when(time.time() - seconds)}; "
        "pending and quarantined rows are kept"
    )
    return 0
