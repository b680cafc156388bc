"""``ackledger refused``: the messages a consumer refused for good, listed and replayed."""

from __future__ import annotations

import argparse
import json

from .arguments import existing_target, handlers_arg


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    refused = commands.add_parser(
        "refused",
        help="list and replay the messages a consumer refused for good",
        description="A message `consume` refused for good (invalid, a conflict, no handler, "
        "the handler's Rejected) is kept in the inbox database before it is rejected or "
        "terminated: its identity when readable, the reason, the raw message (at most 64 "
        "KiB), when. List them, and replay them once the cause is fixed.",
    )
    actions = refused.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the refused messages, oldest first")
    _add_db(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=cmd_refused_list)

    replay = actions.add_parser(
        "replay",
        help="apply refused messages again through the inbox",
        description="Apply a refused message again, through the inbox as a new arrival: "
        "applied or a duplicate, it leaves the list; refused again, it stays with the reason "
        "it has now; a transient failure leaves it as it was. Exit 0 when every replayed "
        "message was applied or a duplicate, 1 otherwise.",
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("number", nargs="?", type=_number, metavar="ID",
                       help="the message's number (`refused list`)")  # fmt: skip
    which.add_argument("--all", action="store_true", help="replay every refused message")
    _add_db(replay)
    replay.add_argument(
        "--handlers", type=handlers_arg, metavar="MODULE:ATTR",
        help="a dict of event type -> handler(tx, event), as for `consume`",
    )  # fmt: skip
    replay.set_defaults(handler=cmd_refused_replay)


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", required=True, metavar="PATH_OR_URL",
        help="the consumer's inbox database (SQLite file or postgresql:// URL)",
    )  # fmt: skip


def _number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a refused message's number, got {text!r}")
    return int(text)


def cmd_refused_list(args: argparse.Namespace) -> int:
    from ..ops.listings import refused_table
    from ..sink.inbox import Inbox
    from ..sink.refused import listing

    with Inbox(existing_target(args.db, "db")) as inbox:
        rows = listing(inbox)
    print(json.dumps(rows) if args.json else refused_table(rows))
    return 0


def cmd_refused_replay(args: argparse.Namespace) -> int:
    from ..sink.inbox import Inbox
    from ..sink.refused import replay, replay_all
    from . import UsageError

    with Inbox(existing_target(args.db, "db"), handlers=args.handlers) as inbox:
        if args.all:
            done = replay_all(inbox)
        else:
            try:
                done = [replay(inbox, args.number)]
            except KeyError:
                raise UsageError(f"ID: no refused message {args.number} in {args.db}") from None
    for found in done:
        print(found.text())
    if not done:
        print("nothing refused")
    return 0 if all(found.applied for found in done) else 1
