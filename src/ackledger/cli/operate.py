"""Operating commands: status, trace, quarantine, requeue, quarantined, purge.

Each checks its arguments, refusing bad ones before any database is opened, then makes one
call into the library and prints its answer.
"""

from __future__ import annotations

import argparse
import json
import time

from ..event import check_identifier
from ..ops.databases import is_url
from ..ops.listings import quarantined_table
from ..ops.probe import base_url
from ..ops.reconcile import reconcile, reconcile_text
from ..ops.status import read_status, service_url
from ..ops.timestamps import utc_timestamp
from ..ops.trace import trace, trace_text
from ..store import is_postgres
from ..wire.targets import check_target
from .arguments import add_source, duration_arg, existing_target, open_outbox
from .exposure import add_client_token, token_of


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status",
        help="what to watch: pending, oldest pending age, attempts, quarantined, sent",
        description="Outbox figures, and the counters of a sink or ledger service if given.",
    )
    add_source(status)
    status.add_argument("--sink", metavar="URL", help="a sink service, http://HOST:PORT")
    status.add_argument("--ledger", metavar="URL", help="a ledger service, http://HOST:PORT")
    status.add_argument("--json", action="store_true", help="print JSON")
    add_client_token(status)
    status.set_defaults(handler=cmd_status)

    tracer = commands.add_parser(
        "trace",
        help="the evidence for one event at every stage",
        description="One row per stage (accepted, outbox, sink, ack, sent): what was seen, "
        "where, and what cannot be known; for a relay to a broker, which confirm the mark "
        "stands for. Reads only.",
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
    tracer.add_argument("--json", action="store_true", help="print JSON")
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
        "--show", type=int, default=20, metavar="N", help="ids listed per class (default 20)"
    )
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
    sink = service_url(args.sink) if args.sink is not None else None
    ledger = service_url(args.ledger) if args.ledger is not None else None
    status = read_status(
        existing_target(args.source), sink=sink, ledger=ledger, token=token_of(args)
    )
    print(json.dumps(status.figures) if args.json else status.text())
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    check_identifier(args.event_id, "EVENT_ID", 128)
    if args.sink is not None and is_url(args.sink) and not is_postgres(args.sink):
        check_target(base_url(args.sink) + "/events", "/events")
    report = trace(args.event_id, existing_target(args.source), args.sink, token_of(args))
    print(json.dumps(report) if args.json else trace_text(report))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    if is_url(args.sink) and not is_postgres(args.sink):
        check_target(base_url(args.sink) + "/events", "/events")
    report = reconcile(existing_target(args.source), args.sink, shown=args.show)
    print(json.dumps(report) if args.json else reconcile_text(report))
    return 1 if report["alarms"] else 0


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
