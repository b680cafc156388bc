"""The raw side of a transaction: run one statement, get its rows.

Every typed operation of the store is written on top of these four calls, and
``Outbox.transaction()`` hands ``execute`` to users for their own business writes. All SQL
in the project uses ``?`` placeholders; a backend whose driver wants another style rewrites
them once per statement text.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

Row = tuple[Any, ...]
Params = Sequence[Any]


class Executor(abc.ABC):
    """One open transaction's statements. ``execute`` returns all rows the statement produced."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Params = ()) -> list[Row]: ...

    @abc.abstractmethod
    def executemany(self, sql: str, params: Sequence[Params]) -> None: ...

    def one(self, sql: str, params: Params = ()) -> Row | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Params = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else row[0]
