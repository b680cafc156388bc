"""Argument helpers shared by the command modules."""

from __future__ import annotations

import argparse
import os

from ..outbox import MAX_BATCH, Outbox
from ..store.base import SYNCHRONOUS_MODES

Subparsers = argparse._SubParsersAction  # the type argparse gives sub-command groups


def add_synchronous(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--synchronous",
        type=str.upper,
        choices=SYNCHRONOUS_MODES,
        default="FULL",
        help="durability: FULL survives power loss (default), NORMAL only a process crash "
        "(PostgreSQL: synchronous_commit on/off)",
    )


def limit_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_BATCH}, got {value}")
    return value


def port_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (0 < value < float("inf")):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def is_url(target: str) -> bool:
    return "://" in target


def existing_target(target: str, what: str = "source") -> str:
    """A database that must already exist: reading commands never create one by a typo."""
    from . import UsageError

    if not is_url(target) and not os.path.isfile(target):
        raise UsageError(f"--{what}: no database at {target!r}")
    return target


def open_outbox(target: str, synchronous: str = "FULL", *, create: bool = False) -> Outbox:
    if not create:
        existing_target(target)
    return Outbox(target, synchronous=synchronous)
