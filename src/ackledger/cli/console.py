"""``ackledger console``: the operator's page on an outbox, and optionally its sink and ledger."""

from __future__ import annotations

import argparse

from ..ops.databases import is_url
from ..store import is_database_url
from .arguments import add_inbox_name, existing_target, open_outbox, port_arg
from .exposure import add_exposure, guarded


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    console = commands.add_parser(
        "console",
        help="a web page: status figures, pending and quarantined events, traces, reconcile, "
        "ledger keys",
        description="Serve the operator's page on 127.0.0.1 (by default): the status figures "
        "with their meaning and a chart of pending over time, pending and quarantined events "
        "(grouped by reason) with quarantine and requeue buttons, a trace per event, "
        "reconcile's result (with --sink) and the ledger's keys with their attempts (with "
        "--ledger). The buttons (POST) need the token of --token-file, typed into the page; "
        "the pages are read without it, and without --token-file the console is read-only. "
        "/openapi.json and /docs describe its routes. Prints 'listening on URL' once bound.",
    )
    console.add_argument(
        "--source", required=True, metavar="PATH_OR_URL",
        help="the outbox database (SQLite file or postgresql:// URL)",
    )  # fmt: skip
    console.add_argument(
        "--sink", metavar="PATH_OR_URL",
        help="where events are applied: the inbox database of a sink or broker consumer, or "
        "a sink service's URL (traces ask it; reconcile compares with it)",
    )  # fmt: skip
    add_inbox_name(console, "with an inbox database as --sink: the inbox traced and reconciled")
    console.add_argument(
        "--ledger", metavar="PATH_OR_URL",
        help="the ledger's database (SQLite file or postgresql:// URL): its keys and attempts",
    )  # fmt: skip
    console.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    console.add_argument("--port", type=port_arg, default=8090, help="port (0: any free port)")
    add_exposure(
        console,
        "a file holding the token the quarantine and requeue buttons (POST) must carry: typed "
        "into the page, or sent as Authorization: Bearer (compared in constant time); the "
        "pages are read without it; required to bind beyond loopback",
    )
    console.set_defaults(handler=cmd_console)


def _check_sink(sink: str) -> str:
    from ..wire.targets import check_service_url

    if is_database_url(sink):
        return sink
    if is_url(sink):
        check_service_url(sink)
        return sink
    return existing_target(sink, "sink")


def cmd_console(args: argparse.Namespace) -> int:
    from . import require_extra

    require_extra("console")  # name the console's extra, not the server's, when it is missing
    from ..ledger.ledger import Ledger
    from ..ops.console.app import Console, create_console_app
    from ..web.server import serve
    from . import UsageError
    from .serve import listen

    source = existing_target(args.source)
    sink = None if args.sink is None else _check_sink(args.sink)
    ledger_db = None if args.ledger is None else existing_target(args.ledger, "ledger")
    if ledger_db is not None and is_url(ledger_db) and not is_database_url(ledger_db):
        raise UsageError(
            "--ledger: give the ledger's database (a SQLite file or postgresql:// URL)"
        )
    sock = listen(args)
    with open_outbox(source) as outbox:
        ledger = None if ledger_db is None else Ledger(ledger_db)
        try:
            console = Console(
                source, outbox, sink=sink, inbox_name=args.inbox_name, ledger=ledger,
                token=args.token,
            )  # fmt: skip
            serve(guarded(create_console_app(console), sock, args, token=False), sock, "console")
        finally:
            if ledger is not None:
                ledger.close()
    return 0
