"""The relay's own senders take an event as the outbox stored it: its text, not a copy.

``dispatch_batch`` hands a user's ``send_batch`` fresh deep copies (CONTRACT section 4), and a
sender must then validate and encode what it was given, as the callback may have changed it.
An event the outbox selected was validated at publish and stored as its canonical JSON; a
string cannot be changed, so handing that text to one of ackledger's own senders is as safe as
a copy, and spares the second validation and encoding of every event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Stored:
    """One selected event: its attributes as read (not to be changed: they are the
    selection's own) and the JSON text the outbox holds for it."""

    attributes: Mapping[str, Any]
    text: str

    @property
    def id(self) -> str:
        value: str = self.attributes["id"]
        return value


@runtime_checkable
class StoredSender(Protocol):
    """A sender that also sends stored events: the acknowledged prefix, as ``send_batch``."""

    def send_stored(self, events: Sequence[Stored]) -> int: ...


def stored_sender(sender: object) -> StoredSender | None:
    """``sender`` if its ``send_stored`` may stand in for its ``send_batch``, else None.

    Only when one class defines both, and the instance replaces neither: a subclass or a patch
    that changes ``send_batch`` may do anything to the events it is given, so it gets copies."""
    if not isinstance(sender, StoredSender) or {"send_batch", "send_stored"} & _vars_of(sender):
        return None
    for klass in type(sender).__mro__:
        names = set(vars(klass))
        if "send_batch" in names or "send_stored" in names:
            return sender if {"send_batch", "send_stored"} <= names else None
    return None


def _vars_of(obj: object) -> set[str]:
    return set(getattr(obj, "__dict__", ()))
