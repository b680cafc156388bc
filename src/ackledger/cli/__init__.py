"""The ``ackledger`` command line: thin, every verb calls the library.

Bad input anywhere gets one line on stderr and exit status 2, and nothing is written; a
database that cannot be reached or used gets one line and exit status 4 (``exits``). Each
module in ``COMMAND_MODULES`` adds its own sub-commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .._core import telemetry
from .._core.extras import EXTRA_OF_MODULE, missing_extra
from .._version import __version__
from ..errors import AckledgerError
from ..store import database_errors, unreachable_errors
from . import console, consume, demo, ledger, migrate, operate, relay, serve, source, verify
from . import inbox as inbox_commands
from . import refused as refused_commands
from .exits import EPILOG, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_UNREACHABLE

COMMAND_MODULES = (
    source, serve, ledger, demo, migrate, relay, operate, consume, inbox_commands,
    refused_commands, console, verify,
)  # fmt: skip


#: The commands that run a service, a relay or a consumer: they set up OpenTelemetry when
#: ``OTEL_TRACES_EXPORTER`` asks for it (CONTRACT §10), and flush it when they end.
TRACED_COMMANDS = frozenset({"serve", "relay", "consume", "dispatch"})


def require_extra(extra: str) -> None:
    """Import every module of ``extra`` now, so that a command that needs it only in the
    processes it starts (``demo``) names the missing extra (exit 2) before it starts any."""
    for module, needed_by in EXTRA_OF_MODULE.items():
        if needed_by == extra:
            importlib.import_module(module)


class UsageError(Exception):
    """Bad input found after parsing (a missing file, an unreadable event...)."""


class Parser(argparse.ArgumentParser):
    """Every parser of the command line, sub-commands' included (argparse makes those of the
    class of their parent): no abbreviated options, since ``--sourc`` taken as ``--source``
    today is a script that breaks when an option that shares the prefix is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message}")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    first_line = message.strip().splitlines()[0] if message.strip() else "bad input"
    print(f"ackledger: error: {first_line}", file=sys.stderr)
    raise SystemExit(code)


def build_parser() -> Parser:
    parser = Parser(
        prog="ackledger",
        description="Retry freely, apply once: outbox, relay, inbox and idempotency ledger.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ackledger {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    traced = args.command in TRACED_COMMANDS
    try:
        if traced:
            telemetry.configure(f"ackledger-{args.command}")
        code: int = args.handler(args)
    except (UsageError, AckledgerError, ValueError, TypeError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, KeyError):
            message = f"unknown event id {message!r}"
        fail(str(message))
    except unreachable_errors() as exc:
        fail(f"database unavailable: {exc}", EXIT_UNREACHABLE)
    except database_errors() as exc:
        fail(f"database: {exc}")
    except ModuleNotFoundError as exc:
        # A command that needs a missing extra says which to install, not a traceback.
        missing = missing_extra(exc, args.command)
        if missing is None:
            raise
        fail(str(missing))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        if traced:
            telemetry.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
