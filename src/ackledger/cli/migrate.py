"""``ackledger migrate``: bring a database's schema up to date, and say where it stands.

Opening a database through the library migrates it too; this command lets a deployment do it
once, up front (an init container, a release step), before any service starts.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..store import open_backend
from ..store.base import migrate_and_report
from .common import add_synchronous


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
    backend = open_backend(args.target, synchronous=args.synchronous, migrate_schema=False)
    try:
        result, unknown = migrate_and_report(backend)
    finally:
        backend.close()
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['target']}: applied {result['applied']} migration(s); "
            f"schema at version {result['version']} ({', '.join(result['migrations'])})"
        )
    if unknown:
        # A newer ackledger has migrated this database: this one may not understand it.
        print(f"warning: migrations unknown to this version: {', '.join(unknown)}", file=sys.stderr)
    return 0
