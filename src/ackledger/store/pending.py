"""A pending event as the selection reads it: the text the outbox stored, parsed when needed.

The outbox stores each event as the canonical JSON its publish validated, beside the columns
that the relay reads (``id``, ``source``, ``partitionkey``). A batch of the relay needs the
ids for its marks and, with its own HTTP sender, the identity that the answer must name: all
columns, so a ``PendingRow`` parses its text only when something asks for another attribute
(a broker's headers) or for the event itself. ``pending()`` hands out ``PendingEvent``s: the
parsed dict (with its ``seq``) that also keeps the text, for the per-item path.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any

from .._core.json_text import loads

#: What the selections read, in this order: the row's number, the columns the relay reads
#: (the stored event's id, source and partitionkey, as publish wrote them from the same
#: validated event as the text) and the text.
PENDING_SELECT = "seq, id, source, partitionkey, event"


#: Attributes that every send looks for and most events lack: the trace context (CONTRACT
#: §10), quoted as the stored text writes a key. The text is canonical JSON, whose keys are
#: written as they are (these names need no escape), so where the quoted name does not occur
#: at all the event has no such attribute, and the row need not be parsed to say so.
_SELDOM = {"traceparent": '"traceparent"', "tracestate": '"tracestate"'}


class PendingEvent(dict[str, Any]):
    """The event with its ``seq``; ``text`` is its stored JSON, without the ``seq``."""

    __slots__ = ("text",)

    def __init__(self, event: dict[str, Any], text: str) -> None:
        super().__init__(event)
        self.text = text


class PendingRow(Mapping[str, Any]):
    """One selected row: the stored event's attributes as a read-only mapping (without
    ``seq``, which is the row's), answered from the columns for ``id``, ``source`` and
    ``partitionkey`` and from the parsed text for the rest."""

    __slots__ = ("_parsed", "id", "partitionkey", "seq", "source", "text")

    def __init__(self, row: Sequence[Any]) -> None:
        self.seq: int = row[0]
        self.id: str = row[1]
        self.source: str = row[2]
        self.partitionkey: str | None = row[3]
        self.text: str = row[4]
        self._parsed: dict[str, Any] | None = None

    def _attributes(self) -> dict[str, Any]:
        # Parsed once and kept: only this row's readers (the selection's own) see it.
        if self._parsed is None:
            self._parsed = loads(self.text)
        return self._parsed

    def __getitem__(self, name: str) -> Any:
        if name == "id":
            return self.id
        if name == "source":
            return self.source
        return self._attributes()[name]

    def get(self, name: str, default: Any = None) -> Any:
        if name == "partitionkey":
            return default if self.partitionkey is None else self.partitionkey
        if name == "id":
            return self.id
        if name == "source":
            return self.source
        if self._parsed is None:
            quoted = _SELDOM.get(name)
            if quoted is not None and quoted not in self.text:
                return default
        return self._attributes().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._attributes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._attributes())

    def __len__(self) -> int:
        return len(self._attributes())

    def keys(self) -> KeysView[str]:
        return self._attributes().keys()

    def items(self) -> ItemsView[str, Any]:
        return self._attributes().items()

    def values(self) -> ValuesView[Any]:
        return self._attributes().values()

    def copy_event(self) -> dict[str, Any]:
        """A fresh deep copy of the stored event, without ``seq``: parsed from the text, so
        nothing in it is shared with this row or any other copy."""
        copied: dict[str, Any] = loads(self.text)
        return copied

    def event(self) -> PendingEvent:
        """The event with its ``seq``, as ``pending()`` hands it out (a fresh dict)."""
        found = PendingEvent(loads(self.text), self.text)
        found["seq"] = self.seq
        return found


def pending_rows(rows: Sequence[Sequence[Any]]) -> list[PendingRow]:
    """Rows read as ``PENDING_SELECT``."""
    return [PendingRow(row) for row in rows]


def pending_events(rows: Sequence[PendingRow]) -> list[dict[str, Any]]:
    """The selected rows as the events with their ``seq``."""
    return [row.event() for row in rows]
