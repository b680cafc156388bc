"""Operating commands: status, trace, quarantine, requeue, quarantined, purge.

Each checks its arguments, refusing bad ones before any database is opened, then makes one
call into the library and prints its answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .._core.timestamps import utc_timestamp
from ..envelope import check_event_id
from ..ops.databases import is_url
from ..ops.listings import quarantined_table, quarantined_text, requeued_lines
from ..ops.reconcile import reconcile, reconcile_text
from ..ops.status import is_service, read_status, service_url
from ..ops.trace import trace, trace_text
from ..store import is_database_url
from ..wire.targets import check_service_url
from .arguments import (
    add_http_client,
    add_inbox_name,
    add_source,
    duration_arg,
    existing_target,
    open_outbox,
)
from .exits import EXIT_OK, EXIT_STOPPED, EXIT_UNREACHABLE
from .exposure import add_client_token, token_of


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status",
        help="what to watch: pending, oldest pending age, attempts, quarantined, sent",
        description="Outbox figures, and the counters of a sink (its service or its inbox "
        "database) or a ledger service if given. "
        f"Reads only. A service that cannot be read is shown as such, and the exit status is "
        f"then {EXIT_UNREACHABLE}.",
    )
    add_source(status)
    status.add_argument(
        "--sink", metavar="PATH_OR_URL",
        help="a sink service, http://HOST:PORT (or its /events URL, a mounted inbox's "
        "http://HOST:PORT/PREFIX/events too), or the inbox database "
        "(SQLite file or postgresql:// URL) of a sink or broker consumer",
    )  # fmt: skip
    status.add_argument(
        "--ledger", metavar="URL",
        help="a ledger service, http://HOST:PORT (or its /deliveries URL)",
    )  # fmt: skip
    status.add_argument("--json", action="store_true", help="print JSON")
    add_http_client(status, "a service (e.g. a Service name in a cluster)")
    add_client_token(status)
    status.set_defaults(handler=cmd_status)

    tracer = commands.add_parser(
        "trace",
        help="the evidence for one event at every stage",
        description="One row per stage (accepted, outbox, sink, ack, sent): what was seen, "
        "where, and what cannot be known; for a relay to a broker, which confirm the mark "
        f"stands for. Reads only. Exit {EXIT_STOPPED} when the id is known nowhere, "
        f"{EXIT_UNREACHABLE} when the sink could not be read.",
    )
    tracer.add_argument("event_id", metavar="EVENT_ID")
    add_source(tracer)
    tracer.add_argument(
        "--sink",
        metavar="PATH_OR_URL",
        help="where the event is applied: the sink service's URL, or the inbox database "
        "(SQLite file or postgresql:// URL) of a sink or of a broker consumer; without it "
        "the sink's stage is not asked",
    )
    add_inbox_name(tracer, "with an inbox database as --sink: the inbox asked")
    tracer.add_argument("--json", action="store_true", help="print JSON")
    add_http_client(tracer, "the sink service (e.g. its Service name in a cluster)")
    add_client_token(tracer)
    tracer.set_defaults(handler=cmd_trace)

    reconciler = commands.add_parser(
        "reconcile",
        help="where the outbox and the sink disagree, and which of it is an alarm",
        description="Compare the outbox with the sink's inbox: applied but not marked "
        "(harmless), marked sent with no receipt (an alarm), other content (an alarm), "
        "receipts the outbox has no row for (purged or never here). Reads only. Exit 0 if no "
        "alarm, 1 if any.",
    )
    add_source(reconciler)
    reconciler.add_argument(
        "--sink",
        required=True,
        metavar="PATH_OR_URL",
        help="the inbox database (SQLite file or postgresql:// URL) of the sink or broker "
        "consumer; or the sink service's URL (then only the outbox's rows are checked, one "
        "request each)",
    )
    reconciler.add_argument(
        "--max-ids", type=int, default=20, metavar="N", help="ids listed per group (default 20)"
    )
    add_inbox_name(reconciler, "with an inbox database as --sink: the inbox compared")
    # The option's earlier name, still read so that scripts written for it keep working.
    reconciler.add_argument("--show", type=int, dest="max_ids", help=argparse.SUPPRESS)
    reconciler.add_argument("--json", action="store_true", help="print JSON")
    reconciler.set_defaults(handler=cmd_reconcile)

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


def cmd_status(args: argparse.Namespace) -> int:
    hosts = args.allow_host
    # Checked before the database is opened: a bad URL is bad input.
    sink = args.sink
    if sink is not None and not is_service(sink):
        sink = existing_target(sink, "sink")
    for name, url in (("sink", sink), ("ledger", args.ledger)):
        if url is not None and (name == "ledger" or is_service(url)):
            _service_arg(name, url, hosts)
    status = read_status(
        existing_target(args.source),
        sink=sink,
        ledger=args.ledger,
        token=token_of(args),
        timeout=args.timeout,
        allowed_hosts=hosts,
    )
    print(json.dumps(status.figures) if args.json else status.text())
    for name in status.unreadable:
        print(f"ackledger: status: the {name} could not be read", file=sys.stderr)
    return EXIT_UNREACHABLE if status.unreadable else EXIT_OK


def _service_arg(name: str, url: str, hosts: list[str]) -> None:
    from ..errors import UnsafeTarget
    from . import UsageError

    try:
        service_url(url, name, hosts)
    except UnsafeTarget as exc:
        raise UsageError(f"--{name}: {exc}") from None


def cmd_trace(args: argparse.Namespace) -> int:
    check_event_id(args.event_id, "EVENT_ID")
    if args.sink is not None and is_url(args.sink) and not is_database_url(args.sink):
        check_service_url(args.sink, allowed_hosts=args.allow_host)
    report = trace(
        args.event_id,
        existing_target(args.source),
        args.sink,
        token_of(args),
        timeout=args.timeout,
        allowed_hosts=args.allow_host,
        inbox_name=args.inbox_name,
    )
    print(json.dumps(report) if args.json else trace_text(report))
    if not report["sink_readable"]:
        print("ackledger: trace: the sink could not be read", file=sys.stderr)
        return EXIT_UNREACHABLE
    if not report["known"]:
        print(
            f"ackledger: trace: {args.event_id!r} is known nowhere: no order, no outbox row "
            + ("and no receipt at the sink" if args.sink else "(the sink was not asked)"),
            file=sys.stderr,
        )
        return EXIT_STOPPED
    return EXIT_OK


def cmd_reconcile(args: argparse.Namespace) -> int:
    if not 0 <= args.max_ids <= 10_000:
        raise ValueError(f"--max-ids: must be an integer from 0 to 10000, got {args.max_ids}")
    if is_url(args.sink) and not is_database_url(args.sink):
        check_service_url(args.sink)
    report = reconcile(
        existing_target(args.source), args.sink, max_ids=args.max_ids, inbox_name=args.inbox_name
    )
    print(json.dumps(report) if args.json else reconcile_text(report))
    return 1 if report["alarms"] else 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    check_event_id(args.event_id, "EVENT_ID")
    if not args.reason.strip():
        raise ValueError("--reason: must say why")
    with open_outbox(args.source) as outbox:
        seq = outbox.quarantine(args.event_id, args.reason)
        shown = outbox.backend.location
    print(quarantined_text(args.event_id, seq, args.reason, shown))
    return 0


def cmd_requeue(args: argparse.Namespace) -> int:
    check_event_id(args.event_id, "EVENT_ID")
    with open_outbox(args.source) as outbox:
        record = outbox.requeue(args.event_id)
    print("\n".join(requeued_lines(record)))
    return 0


def cmd_quarantined(args: argparse.Namespace) -> int:
    with open_outbox(args.source) as outbox:
        rows = outbox.quarantined()
    print(json.dumps(rows) if args.json else quarantined_table(rows))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    seconds = args.sent_older_than
    with open_outbox(args.source) as outbox:
        count = outbox.purge(seconds)
    print(
        f"purged {count} sent row(s) sent before {utc_timestamp(time.time() - seconds)}; "
        "pending and quarantined rows are kept"
    )
    return 0
