"""Events for the stored-path tests of the senders (``wire/stored.py``), in a SQLite outbox.

To tell the stored path from the copy path from outside, one event's stored text is rewritten
with a space in it (still the same JSON): the stored path sends those very bytes, the copy
path (a user's wrapper: deep copies, validated and encoded by the sender) its canonical form.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ackledger
from ackledger import Outbox, dispatch, dispatch_batch
from ackledger.wire.sender import Sender
from tests.events import SOURCE, lab

LOOSE_ID = "s-02"


def stored_events() -> list[dict[str, Any]]:
    """Lab events, and a generic one with what encodes unlike the rest: an extension of text
    outside ASCII with spaces, a trace context, nested data."""
    found = [lab(f"s-{n:02d}", "snack-7", n + 1) for n in range(3)]
    found.append({
        **ackledger.new_event("test.stored", {"sku": "crème", "qty": 2,
                              "tags": [{"a": [1, 2.5, None, True]}]}, source=SOURCE, id="s-03"),
        "n": "crème 2.5", "count": 7, "flag": True, "traceparent": f"00-{'1' * 32}-{'2' * 16}-01",
    })  # fmt: skip
    return found


def stored_outbox(path: Path) -> Outbox:
    outbox = Outbox(path, source=SOURCE)
    for event in stored_events():
        outbox.publish(event)
    return outbox


def loosen(path: Path) -> bytes:
    """Rewrite LOOSE_ID's stored text with a space after its first brace: the same JSON, other
    bytes. Returns the new text."""
    conn = sqlite3.connect(path)
    try:
        (text,) = conn.execute(
            "SELECT event FROM ackledger_outbox WHERE id = ?", (LOOSE_ID,)
        ).fetchone()
        loose = "{ " + str(text)[1:]
        conn.execute("UPDATE ackledger_outbox SET event = ? WHERE id = ?", (loose, LOOSE_ID))
        conn.commit()
    finally:
        conn.close()
    return loose.encode()


Dispatcher = Callable[[Outbox], list[str]]


def dispatchers(wire: Sender, per: str) -> tuple[Dispatcher, Dispatcher]:
    """``dispatch_batch`` (``per="batch"``) or ``dispatch`` (``"item"``) of an outbox to
    ``wire``: with its own method (the stored path), and with a wrapper of it (copies)."""
    if per == "batch":
        return (
            lambda outbox: dispatch_batch(outbox, wire.send_batch),
            lambda outbox: dispatch_batch(outbox, lambda events: wire.send_batch(events)),  # noqa: PLW0108
        )
    return (
        lambda outbox: dispatch(outbox, wire.send),
        lambda outbox: dispatch(outbox, lambda event: wire.send(event)),  # noqa: PLW0108
    )
