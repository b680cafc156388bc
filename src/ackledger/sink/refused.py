"""Refused messages: list them, and replay one through the inbox once its cause is fixed.

A replay is a new arrival of the kept message through the consumers' own judgement
(``consume.judge``): applied or a duplicate, it leaves the list; refused again, its row
keeps the newest reason; a transient failure leaves it as it was, to be replayed later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .consume import APPLIED, DUPLICATE, FAILED, REJECTED, judge
from .inbox import Inbox

#: What a replay can come to.
REFUSED_AGAIN = "refused"
REPLAY_OUTCOMES = (APPLIED, DUPLICATE, REFUSED_AGAIN, FAILED)


@dataclass(frozen=True)
class Replayed:
    refused_no: int
    outcome: str
    reason: str = ""

    @property
    def applied(self) -> bool:
        """Applied now, or found applied before: it has left the list."""
        return self.outcome in (APPLIED, DUPLICATE)

    def text(self) -> str:
        if self.applied:
            return f"refused message {self.refused_no}: {self.outcome}, removed from the list"
        if self.outcome == REFUSED_AGAIN:
            return f"refused message {self.refused_no}: refused again: {self.reason}"
        return f"refused message {self.refused_no}: failed, kept for a later replay: {self.reason}"


def listing(inbox: Inbox, limit: int | None = None) -> list[dict[str, Any]]:
    """The refused messages, oldest first, each with its message shown as text."""
    with inbox.backend.read() as tx:
        rows = tx.refused_list(limit)
    return [shown(row) for row in rows]


def shown(row: dict[str, Any]) -> dict[str, Any]:
    """A refused row as JSON can carry it: the message as text (undecodable bytes replaced),
    and whether it was cut at the kept size."""
    message: bytes = row["message"]
    return {
        **row,
        "message": message.decode("utf-8", errors="replace"),
        "truncated": row["message_bytes"] > len(message),
    }


def replay(
    inbox: Inbox, refused_no: int, receive: Callable[[object], str] | None = None
) -> Replayed:
    """Apply refused message ``refused_no`` again (through ``receive`` when given, as
    ``consume.judge``); KeyError when there is no such row."""
    with inbox.backend.read() as tx:
        row = tx.refused_get(refused_no)
    if row is None:
        raise KeyError(refused_no)
    if row["message_bytes"] > len(row["message"]):
        # Only its first bytes were kept: applying them would be another message.
        return Replayed(
            refused_no, REFUSED_AGAIN, f"only {len(row['message'])} of its "
            f"{row['message_bytes']} bytes were kept; it cannot be replayed from here",
        )  # fmt: skip
    verdict = judge(inbox, row["message"], row["content_type"], receive=receive)
    if verdict.committed:
        with inbox.backend.write() as tx:
            tx.refused_delete(refused_no)
        return Replayed(refused_no, verdict.outcome)
    if verdict.outcome == REJECTED:
        # Refused again: one row per message, with the reason it has now.
        with inbox.backend.write() as tx:
            number = tx.refused_record(
                verdict.event_id, verdict.source, verdict.reason, message=row["message"],
                content_type=row["content_type"], now=time.time(),
            )  # fmt: skip
            if number != refused_no:
                tx.refused_delete(refused_no)
        return Replayed(refused_no, REFUSED_AGAIN, verdict.reason)
    return Replayed(refused_no, FAILED, verdict.reason)


def replay_all(inbox: Inbox) -> list[Replayed]:
    """Replay every refused message once, oldest first."""
    with inbox.backend.read() as tx:
        numbers = [int(row["refused_no"]) for row in tx.refused_list()]
    return [replay(inbox, number) for number in numbers]
