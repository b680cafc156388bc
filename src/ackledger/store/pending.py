"""A pending event as the selection reads it: the parsed event, and the text the outbox stored.

The outbox stores each event as the canonical JSON its publish validated. A relay's own sender
(``Stored`` in ``wire/stored.py``) may send that text as it is, instead of validating and
encoding the parsed copy again; everyone else sees an ordinary dict (with its ``seq``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


class PendingEvent(dict[str, Any]):
    """The event with its ``seq``; ``text`` is its stored JSON, without the ``seq``."""

    __slots__ = ("text",)

    def __init__(self, event: dict[str, Any], text: str) -> None:
        super().__init__(event)
        self.text = text


def pending_events(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows of (seq, event text) as the events with their ``seq``."""
    found: list[dict[str, Any]] = []
    for seq, text in rows:
        event = PendingEvent(json.loads(text), text)
        event["seq"] = seq
        found.append(event)
    return found
