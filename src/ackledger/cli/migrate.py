"""``ackledger migrate``: the schema up to date before any service starts (``store.schema``),
or, with ``--sql``, the statements that make it, for the user's own migration tool."""

from __future__ import annotations

import argparse
import json
import sys

from .. import plugins
from ..store import target_dialect
from ..store.schema import DIALECTS, schema_script, upgrade_schema
from .arguments import add_synchronous


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "migrate",
        help="apply the schema migrations a database lacks, or print their SQL",
        description="Create or upgrade the schema of a SQLite file (created if missing) or a "
        "PostgreSQL database (postgresql://...; ?schema=NAME puts ackledger's tables in that "
        "schema, created if missing). Every table is named ackledger_*; a database made by an "
        "ackledger of before those names is renamed in place. Safe to run from several "
        "processes at once: each migration is applied exactly once. With --sql, print the "
        "statements that give a new database of the target's dialect the whole schema (for "
        "Alembic or Django migrations) and touch nothing. With --lab, also the lab's "
        "tables (orders, inventory).",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--target", metavar="PATH_OR_URL", help="SQLite file or postgresql:// URL")
    which.add_argument(
        "--dialect", choices=DIALECTS, help="with --sql: the database kind, instead of --target"
    )
    parser.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL for a new database instead of migrating (nothing is opened)",
    )
    parser.add_argument(
        "--lab",
        action="store_true",
        help="also the lab's tables (orders, inventory), which only the reference domain uses",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_synchronous(parser)
    parser.set_defaults(handler=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from . import UsageError  # the package imports this module: a top-level import is a cycle

    if args.sql:
        if args.json:
            raise UsageError("--json: not with --sql (which prints SQL)")
        # The dialect is told from the target's form alone: a SQLite file is not created, a
        # PostgreSQL server is not asked (it need not exist yet).
        dialect = args.dialect or target_dialect(args.target)
        sys.stdout.write(schema_script(dialect, plugin_types=_plugin_types(args)))
        return 0
    if args.target is None:
        raise UsageError("--dialect: only with --sql; migrating a database needs --target")
    state = upgrade_schema(args.target, args.synchronous, plugin_types=_plugin_types(args))
    print(json.dumps(state.figures()) if args.json else state.text())
    if state.unknown:
        print(
            f"warning: migrations unknown to this version: {', '.join(state.unknown)}",
            file=sys.stderr,
        )
    return 0


def _plugin_types(args: argparse.Namespace) -> list[str]:
    """The plug-ins whose tables ``--lab`` adds: every registered one with tables, which in
    this command's process is the lab alone (no user code registers here)."""
    return plugins.with_tables() if args.lab else []
