"""Inbox commands: ``inbox purge`` (receipt retention)."""

from __future__ import annotations

import argparse

from ..sink.inbox import DEFAULT_RETENTION_SECONDS, MIN_RETENTION_SECONDS
from .arguments import add_inbox_name, duration_arg, existing_target


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inbox = commands.add_parser("inbox", help="maintain a sink's inbox database")
    actions = inbox.add_subparsers(dest="action", metavar="ACTION", required=True)
    purge = actions.add_parser(
        "purge",
        help="delete receipts older than a horizon (retention)",
        description="Delete the receipts first received longer ago than --older-than, walking "
        "the inbox in windows of 1,000 keys and deleting the old receipts in transactions of "
        "at most 1,000 (a sink on the same database waits for one of them at most); "
        "the oldest receipt kept is recorded for the sink's /metrics. A re-send "
        "that arrives after its receipt is gone is applied AGAIN: the horizon must be longer "
        "than any event can stay unmarked at its source (relay back-off cap x attempts, broker "
        "redelivery, an operator's requeue). The counters applied, duplicate and conflict do "
        "not change; purged grows.",
    )
    purge.add_argument(
        "--db",
        "--sink",
        dest="db",
        required=True,
        metavar="PATH_OR_URL",
        help="the sink's database (SQLite file or postgresql:// URL)",
    )
    add_inbox_name(purge, "the inbox whose receipts are purged")
    purge.add_argument(
        "--older-than",
        type=duration_arg,
        default=DEFAULT_RETENTION_SECONDS,
        metavar="DURATION",
        help="e.g. 30d (the default), 12h; under 1h needs --force",
    )
    purge.add_argument(
        "--force", action="store_true", help="allow a horizon under one hour (drills, tests)"
    )
    purge.set_defaults(handler=cmd_inbox_purge)


def cmd_inbox_purge(args: argparse.Namespace) -> int:
    from . import UsageError

    if args.older_than < MIN_RETENTION_SECONDS and not args.force:
        # Refused before the database is opened: nothing is read or written.
        raise UsageError(
            f"--older-than: {args.older_than:g} s is under the 1h floor; a receipt purged while "
            "its event can still be re-sent turns the re-send into a second apply (--force to "
            "go below it)"
        )
    from ..sink.inbox import Inbox

    existing_target(args.db, "db")
    with Inbox(args.db, name=args.inbox_name) as inbox:
        removed = inbox.purge(args.older_than, force=args.force)
    print(f"purged {removed} receipts first received over {args.older_than:g} s ago")
    return 0
