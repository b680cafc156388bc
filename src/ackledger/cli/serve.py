"""``ackledger serve sink|ledger``: the HTTP services."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..sink.handler_call import describe_kinds
from ..web.limits import READ_TIMEOUT_S, Limits
from .arguments import add_synchronous, handlers_arg, port_arg, timeout_arg
from .exposure import add_exposure, check_exposure, guarded
from .sessions import add_session_options, open_inbox

if TYPE_CHECKING:
    import socket

    from ..web.server import LogSettings


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run an HTTP service (sink or ledger)")
    services = serve.add_subparsers(dest="service", metavar="SERVICE", required=True)
    sink = services.add_parser(
        "sink",
        help="the inbox service: POST /events applies each event id once",
        description="Serve /events, /events/batch, /events/{id}, /healthz, /readyz, /metrics, "
        "/openapi.json and /docs. SIGTERM finishes the requests in flight and exits 0. "
        "Prints 'listening on URL' once bound (use --port 0 for a free port).",
    )
    _add_service_options(sink)
    sink.add_argument(
        "--handlers",
        type=handlers_arg,
        metavar="MODULE:ATTR",
        help="a dict of event type -> handler(tx, event) to apply events with, named as "
        "uvicorn names an app (e.g. shipping.events:HANDLERS); with --session or --django "
        "the first argument is that session or connection; the reference handler of "
        "warehouse.stock.added is always there unless the dict names that type too",
    )
    add_session_options(sink)
    sink.set_defaults(handler=cmd_serve_sink)
    ledger = services.add_parser(
        "ledger",
        help="the idempotency ledger: POST /deliveries, one delivery number per business key",
        description="Serve /deliveries, /attempts, /healthz (the ledger's pod_uid and boot_id), "
        "/readyz, /metrics, /openapi.json and /docs. POD_UID names the ledger's Pod (else "
        "local-<hostname>). SIGTERM finishes the requests in flight and exits 0. "
        "Prints 'listening on URL' once bound (use --port 0 for a free port).",
    )
    _add_service_options(ledger)
    ledger.set_defaults(handler=cmd_serve_ledger)


def _add_service_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        required=True,
        metavar="PATH_OR_URL",
        help="a SQLite file (created if missing) or a postgresql:// URL (schema migrated on "
        "start; several processes may serve one PostgreSQL database)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=port_arg, default=8080, help="port (0: any free port)")
    add_synchronous(parser)
    _add_log_options(parser)
    add_exposure(parser)
    parser.add_argument(
        "--read-timeout", type=timeout_arg, default=READ_TIMEOUT_S, metavar="SECONDS",
        help=f"close a connection whose request head, or body, takes longer than this to "
        f"arrive (default {READ_TIMEOUT_S:g})",
    )  # fmt: skip


def _add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="the least severe lines written to stderr (default warning)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="one line per request: method, path, route, status, duration_ms (never a header)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text for people, or json: one JSON object per line (ts, level, event, ...)",
    )


def _log_settings(args: argparse.Namespace) -> LogSettings:
    from ..web.server import LogSettings

    return LogSettings(args.log_level, args.access_log, args.log_format)


def listen(args: argparse.Namespace) -> socket.socket:
    """The listening socket, or one line on what is wrong (a port in use, an unknown host)."""
    from ..web.server import bind
    from . import UsageError

    if not args.host.strip():
        # bind() would take "" as every interface; listening wider must be said explicitly.
        raise UsageError("--host: must not be empty (give 0.0.0.0 to listen on every interface)")
    check_exposure(args)
    try:
        return bind(args.host, args.port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"--host/--port: cannot listen on {args.host}:{args.port}: {reason}"
        ) from None


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(read_timeout=args.read_timeout)


def cmd_serve_sink(args: argparse.Namespace) -> int:
    from ..sink.app import create_sink_app
    from ..web.server import serve

    sock = listen(args)
    with open_inbox(args) as inbox:
        if args.handlers:
            print(f"ackledger sink: handlers {describe_kinds(args.handlers)}", file=sys.stderr,
                  flush=True)  # fmt: skip
        serve(
            guarded(create_sink_app(inbox), sock, args), sock, "sink", _log_settings(args),
            _limits(args),
        )  # fmt: skip
    return 0


def cmd_serve_ledger(args: argparse.Namespace) -> int:
    from ..ledger.app import create_ledger_app
    from ..ledger.ledger import Ledger
    from ..web.server import serve

    sock = listen(args)
    with Ledger(args.db, synchronous=args.synchronous) as ledger:
        serve(
            guarded(create_ledger_app(ledger), sock, args), sock, "ledger", _log_settings(args),
            _limits(args),
        )  # fmt: skip
    return 0
