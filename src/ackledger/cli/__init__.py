"""The ``ackledger`` command line: thin, every verb calls the library.

Bad input anywhere gets one line on stderr and exit status 2, and nothing is written.
Each module in ``COMMAND_MODULES`` adds its own sub-commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import AckledgerError
from ..store import database_errors
from . import consume, demo, ledger, migrate, operate, relay, serve, source
from . import inbox as inbox_commands

COMMAND_MODULES = (source, serve, ledger, demo, migrate, relay, operate, consume, inbox_commands)

EXIT_BAD_INPUT = 2

#: The optional dependencies, by the extra that installs them (pyproject.toml): a command
#: that needs a missing one says which extra to install instead of printing a traceback.
EXTRA_OF_MODULE = {
    "starlette": "server",
    "uvicorn": "server",
    "httptools": "server",
    "prometheus_client": "server",
    "anyio": "server",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "pika": "amqp",
    "nats": "nats",
}


class UsageError(Exception):
    """Bad input found after parsing (a missing file, an unreadable event...)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message}")


def fail(message: str) -> NoReturn:
    first_line = message.strip().splitlines()[0] if message.strip() else "bad input"
    print(f"ackledger: error: {first_line}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> Parser:
    parser = Parser(
        prog="ackledger",
        description="Retry freely, apply once: outbox, relay, inbox and idempotency ledger.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except (UsageError, AckledgerError, ValueError, TypeError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, KeyError):
            message = f"unknown event id {message!r}"
        fail(str(message))
    except database_errors() as exc:
        fail(f"database: {exc}")
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF_MODULE.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        fail(
            f"{args.command}: this needs the '{extra}' extra, which is not installed "
            f"(no module {exc.name!r}): pip install 'ackledger[{extra}]'"
        )
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
