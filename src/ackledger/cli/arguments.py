"""Argument helpers shared by the command modules."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..ops.databases import existing_database
from ..source.outbox import MAX_BATCH, MAX_LISTING, Outbox
from ..store.base import SYNCHRONOUS_MODES

if TYPE_CHECKING:
    from ..sink.handlers import Handler


def add_synchronous(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--synchronous",
        type=str.upper,
        choices=SYNCHRONOUS_MODES,
        default="FULL",
        help="durability: FULL survives power loss (default), NORMAL only a process crash "
        "(PostgreSQL: synchronous_commit on/off)",
    )


#: ``--to`` of ``dispatch`` and ``relay``: every kind of sender (CONTRACT §5).
TO_HELP = (
    "a sink, http://HOST:PORT/events (or any path: a mounted inbox's, batches to it plus "
    "/batch); RabbitMQ, "
    "amqp://USER:PASS@HOST:PORT/VHOST?exchange=E[&routing_key=K]; or NATS JetStream, "
    "nats://HOST:PORT?subject=PREFIX[&stream=S]. A broker URL with &mode=binary publishes "
    "binary mode (the data as the body, the attributes as headers); the default is structured"
)


def add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source", required=True, metavar="PATH", help="outbox database (or postgresql:// URL)"
    )


def add_http_client(parser: argparse.ArgumentParser, what: str = "a target") -> None:
    """``--timeout`` and ``--allow-host``: every command that talks to a service over HTTP."""
    parser.add_argument(
        "--timeout", type=timeout_arg, default=5.0, help="seconds per request (at most 86400)"
    )
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST",
        help=f"also allow this host as {what} (an explicit widening of the loopback allow-list)",
    )  # fmt: skip


def add_ack(parser: argparse.ArgumentParser) -> None:
    """``--ack``: what an HTTP answer must be to count as the ACK (CONTRACT §13)."""
    parser.add_argument(
        "--ack", choices=("exact", "status"), default="exact",
        help="HTTP targets: exact (default: only a 200 whose JSON echoes the event's id and "
        "source) or status (any 2xx, for receivers that echo no identity: 201, 202, 204, an "
        "empty 200; such marks are shown as '2xx without identity')",
    )  # fmt: skip


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            if not text.strip().isascii():  # int() would also take other scripts' digits
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


limit_arg = int_between(1, MAX_BATCH)
listing_arg = int_between(1, MAX_LISTING)
port_arg = int_between(0, 65535)


def positive_float(text: str) -> float:
    try:
        if not text.strip().isascii():
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (0 < value < float("inf")):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def timeout_arg(text: str) -> float:
    """An argparse type: a request time-out, as ``transport.check_timeout`` takes it."""
    from ..wire.targets import check_timeout

    try:
        return check_timeout(positive_float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def json_arg(text: str, name: str) -> object:
    """Parse JSON given on the command line or stdin; bad JSON is a one-line UsageError."""
    from .._core.strict_json import parse_strict_json
    from . import UsageError

    try:
        return parse_strict_json(text)
    except ValueError as exc:
        raise UsageError(f"{name}: not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{name}: JSON nested too deeply") from None


def existing_target(target: str, what: str = "source") -> str:
    """A database that must already exist and be ackledger's (``ops.databases``), refused as
    bad input naming ``--what``."""
    from . import UsageError

    try:
        return existing_database(target, what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def open_outbox(
    target: str,
    synchronous: str = "FULL",
    *,
    create: bool = False,
    event_source: str | None = None,
) -> Outbox:
    if not create:
        existing_target(target)
    return Outbox(target, synchronous=synchronous, source=event_source)


def whole_arg(text: str, least: int | None = None, most: int | None = None) -> int:
    """An argparse type for a whole number, within ``least``..``most`` where given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if (least is not None and value < least) or (most is not None and value > most):
        bound = f"{least} or more" if most is None else f"from {least} to {most}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {text!r}")
    return value


def duration_arg(text: str) -> float:
    """An argparse type for ``30d``, ``12h``... (seconds), with the parser's own message."""
    from .._core.duration import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def on_import_path() -> None:
    """The current directory first on the import path, where a user's ``MODULE:ATTR`` is
    looked for (see ``handlers_arg``)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


def add_inbox_name(parser: argparse.ArgumentParser, what: str) -> None:
    """``--inbox-name``: which of the inboxes sharing a database ``what`` is of."""
    parser.add_argument(
        "--inbox-name",
        type=inbox_name_arg,
        default="default",
        metavar="NAME",
        help=f"{what}, of the inboxes that share the database (Inbox(name=...); default: default)",
    )


def inbox_name_arg(text: str) -> str:
    """An argparse type for ``--inbox-name``: the name, or what is wrong with it."""
    from ..sink.inbox import check_name

    try:
        return check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("name: ")) from None


def handlers_arg(text: str) -> dict[str, Handler]:
    """An argparse type for ``--handlers MODULE:ATTR``: the loaded handlers, or the loader's
    one-line reason as the parser's error (exit 2).

    The current directory is searched first, as uvicorn does for its ``MODULE:APP``: the
    ``ackledger`` script does not put it on the import path the way ``python -m`` does, and a
    handlers module usually sits in the project the command is run from.
    """
    from ..sink.handlers import HandlerSpecError, load_handlers

    on_import_path()
    try:
        return load_handlers(text)
    except HandlerSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
