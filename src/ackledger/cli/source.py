"""Source-side commands: accept, pending, dispatch."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import warehouse
from ..envelope import validate_cloudevent as validate_event
from ..ops.listings import pending_table
from ..source.dispatch import dispatch, dispatch_batch
from ..source.outbox import MAX_LISTING, Outbox
from ..wire.sender import sender
from .arguments import (
    TO_HELP,
    add_ack,
    add_http_client,
    add_source,
    add_synchronous,
    json_arg,
    limit_arg,
    listing_arg,
    open_outbox,
)
from .exposure import add_client_token, token_of
from .jsonlines import write_lines


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    accept = commands.add_parser(
        "accept",
        help="accept lab orders (one JSON on stdin, or JSON lines) into the outbox",
        description='Read one order {"id", "sku", "qty"} as JSON from stdin, write the order '
        "and its warehouse.stock.added event in one transaction, print its seq. With --jsonl, "
        "one order a line, each in its own transaction, one seq printed a line; a bad line "
        "stops with exit 2 naming it, the lines before it stay written. The database is "
        "created if missing.",
    )
    add_source(accept)
    add_jsonl(accept, "order")
    add_synchronous(accept)
    accept.set_defaults(handler=cmd_accept)

    publish = commands.add_parser(
        "publish",
        help="publish events (one CloudEvents JSON on stdin, or JSON lines) into the outbox",
        description="Read one CloudEvents 1.0 event (structured JSON) from stdin and publish "
        "it; print its seq. specversion and source may be left out (the outbox's own source "
        "is used). With --jsonl, one event a line, each in its own transaction, as accept "
        "does. The database is created if missing.",
    )
    add_source(publish)
    add_jsonl(publish, "event")
    publish.add_argument(
        "--event-source",
        metavar="URI",
        help="the outbox's CloudEvents source, stored when the outbox is created (default: "
        "urn:ackledger: and a fresh UUID); an existing outbox must be opened with its own",
    )
    add_synchronous(publish)
    publish.set_defaults(handler=cmd_publish)

    pending = commands.add_parser(
        "pending", help="list pending events in acceptance order", description="List unsent, "
        "unquarantined events in seq order, and say how many more are pending than shown. "
        "Reads only."
    )  # fmt: skip
    add_source(pending)
    pending.add_argument(
        "--limit", type=listing_arg, default=16, help=f"1-{MAX_LISTING} (default 16)"
    )
    pending.add_argument(
        "--json", action="store_true",
        help="print a JSON list (how many more are pending goes to stderr)",
    )  # fmt: skip
    pending.set_defaults(handler=cmd_pending)

    send = commands.add_parser(
        "dispatch",
        help="send one finite batch to a sink",
        description="Send pending events in order; mark each sent only on its exact ACK; stop "
        "at the first failure. Exit 0 if the whole batch was acknowledged, 1 if it stopped.",
    )
    add_source(send)
    send.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help=TO_HELP,
    )
    send.add_argument("--limit", type=limit_arg, default=16, help="1-16 (default 16)")
    send.add_argument("--batch", action="store_true", help="send the batch in one request")
    add_http_client(send)
    add_ack(send)
    add_client_token(send)
    send.add_argument(
        "--exit-after-ack",
        type=int,
        metavar="STATUS",
        help="crash drill: after the first ACK, before marking it sent, exit at once "
        "(os._exit) with STATUS",
    )
    add_synchronous(send)
    send.set_defaults(handler=cmd_dispatch)


def add_jsonl(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--jsonl", metavar="FILE",
        help=f"read one {what} a line (JSON lines) from FILE, - for stdin",
    )  # fmt: skip


def cmd_accept(args: argparse.Namespace) -> int:
    def opened() -> Outbox:
        return open_outbox(args.source, args.synchronous, create=True)

    if args.jsonl is not None:
        write_lines(args.jsonl, warehouse.validate, opened, Outbox.accept)
        return 0
    obj = json_arg(sys.stdin.read(), "stdin")
    order = warehouse.validate(obj)  # before the database is opened: bad input writes nothing
    with opened() as outbox:
        print(outbox.accept(order))
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    def check(obj: object) -> object:
        # Checked before the database is opened (bad input writes nothing); the outbox fills
        # in the source it stores, so a stand-in one is used for the check.
        if type(obj) is dict:
            validate_event({"specversion": "1.0", "source": args.event_source or "/x", **obj})
        else:
            validate_event(obj)
        return obj

    def opened() -> Outbox:
        return open_outbox(
            args.source, args.synchronous, create=True, event_source=args.event_source
        )

    if args.jsonl is not None:
        write_lines(args.jsonl, check, opened, Outbox.publish)
        return 0
    obj = check(json_arg(sys.stdin.read(), "stdin"))
    with opened() as outbox:
        print(outbox.publish(obj))
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    with open_outbox(args.source) as outbox:
        items, total = outbox.pending_listing(args.limit)
    print(json.dumps(items) if args.json else pending_table(items))
    if total > len(items):
        more = f"; --limit N (up to {MAX_LISTING}) for more" if len(items) < MAX_LISTING else ""
        print(
            f"{len(items)} of {total} pending shown{more}", file=sys.stderr if args.json else None
        )
    return 0


def cmd_dispatch(args: argparse.Namespace) -> int:
    # Refused before anything is opened.
    wire = sender(
        args.to, timeout=args.timeout, allowed_hosts=args.allow_host, token=token_of(args),
        ack=args.ack,
    )  # fmt: skip
    crash = args.exit_after_ack

    def die_if_drilled(_: object) -> None:
        if crash is not None:
            print(f"drill: ACK received, exiting with {crash} before marking sent", flush=True)
            os._exit(crash)

    with open_outbox(args.source, args.synchronous) as outbox:
        outbox.record_target(args.to, ack=args.ack)
        try:
            if args.batch:
                marked = dispatch_batch(
                    outbox, wire.send_batch, args.limit, after_delivery=die_if_drilled
                )
            else:
                marked = dispatch(outbox, wire.send, args.limit, after_delivery=die_if_drilled)
        except Exception as exc:
            left = outbox.pending(args.limit)
            print(f"stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            wait = getattr(exc, "retry_after", None)
            if wait is not None:
                print(f"the receiver asks to wait {wait:g} s before the next try", file=sys.stderr)
            print(
                f"still pending: {', '.join(item['id'] for item in left) or 'none'}",
                file=sys.stderr,
            )
            return 1
    for event_id in marked:
        print(f"sent {event_id}")
    print(f"dispatched {len(marked)} event(s)")
    return 0
