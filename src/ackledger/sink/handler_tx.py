"""What a handler is given: the inbox's open transaction, for the event's effect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..store import Tx


class HandlerTransaction:
    """The inbox's transaction as a handler sees it: the effect it writes commits with the
    event's receipt, or neither does. ``?`` placeholders on every backend."""

    __slots__ = ("_tx",)

    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; returns its rows (an empty list for a statement without)."""
        return self._tx.execute(statement, params)

    def executemany(self, statement: str, params: Sequence[Sequence[Any]]) -> None:
        self._tx.executemany(statement, params)


#: ``handler(tx, event)``: apply the event's effect with ``tx.execute``; raise ``Rejected``
#: for an event that can never be applied, anything else for a failure worth retrying.
Handler = Callable[[HandlerTransaction, dict[str, Any]], None]
