"""``ackledger migrate``: the schema up to date before any service starts (``store.schema``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..store.schema import upgrade_schema
from .arguments import add_synchronous


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "migrate",
        help="apply the schema migrations a database lacks",
        description="Create or upgrade the schema of a SQLite file (created if missing) or a "
        "PostgreSQL database (postgresql://...). Safe to run from several processes at once: "
        "each migration is applied exactly once.",
    )
    parser.add_argument(
        "--target", required=True, metavar="PATH_OR_URL", help="SQLite file or postgresql:// URL"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_synchronous(parser)
    parser.set_defaults(handler=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    state = upgrade_schema(args.target, args.synchronous)
    print(json.dumps(state.figures()) if args.json else state.text())
    if state.unknown:
        print(
            f"warning: migrations unknown to this version: {', '.join(state.unknown)}",
            file=sys.stderr,
        )
    return 0
