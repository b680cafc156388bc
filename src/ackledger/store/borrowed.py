"""Stand-in until the borrowed-connection work lands (branch borrow)."""

from __future__ import annotations

from .base import Tx


def borrow(using: object, dialect: str) -> Tx:
    raise TypeError("using: not supported yet")


def same_database(tx: Tx, expected_source: str) -> None:
    raise TypeError("using: not supported yet")
