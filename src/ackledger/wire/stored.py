"""The relay's own senders take an event as the outbox stored it: its text, not a copy.

``dispatch_batch`` hands a user's ``send_batch`` fresh deep copies (CONTRACT section 4), and a
sender must then validate and encode what it was given, as the callback may have changed it.
An event the outbox selected was validated at publish and stored as its canonical JSON; a
string cannot be changed, so handing that text to one of ackledger's own senders is as safe as
a copy, and spares the second validation and encoding of every event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable


class Stored(NamedTuple):
    """One selected event: its attributes as read (not to be changed: they are the
    selection's own) and the JSON text the outbox holds for it. A named tuple: immutable as a
    frozen dataclass is, at two thirds of its cost to make (one is made per event sent)."""

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


@runtime_checkable
class StoredEventSender(Protocol):
    """A sender that also sends one stored event: True only on its exact ACK, as ``send``."""

    def send_stored_event(self, event: Stored) -> bool: ...


@runtime_checkable
class SplitSender(Protocol):
    """A sender whose stored batch send comes in two halves, so that several batches can be
    in flight at once (``relay --batch --inflight N``): ``publish_stored`` sends a batch
    and returns a handle at once; ``confirmed`` waits for that batch's ACKs and returns its
    acknowledged prefix with the same rules as ``send_stored`` (``refusal`` kept);
    ``settled`` says, without waiting, whether ``confirmed`` would return at once."""

    def publish_stored(self, events: Sequence[Stored]) -> Any: ...

    def confirmed(self, flight: Any) -> int: ...

    def settled(self, flight: Any) -> bool: ...


def split_sender(sender: object) -> SplitSender | None:
    """``sender`` if it is an own stored sender that also sends in two halves, else None."""
    if stored_sender(sender) is None or not isinstance(sender, SplitSender):
        return None
    return sender if _own_pair(sender, "publish_stored", "confirmed") else None


def stored_sender(sender: object) -> StoredSender | None:
    """``sender`` if its ``send_stored`` may stand in for its ``send_batch``, else None."""
    # No isinstance against the Protocol: a runtime-checkable one inspects every member on
    # each call (~7 µs), and this runs on every ``dispatch_batch`` call; a class that
    # defines both methods has the one the Protocol asks for.
    if not _own_pair(sender, "send_batch", "send_stored"):
        return None
    return cast(StoredSender, sender)


def stored_event_sender(sender: object) -> StoredEventSender | None:
    """``sender`` if its ``send_stored_event`` may stand in for its ``send``, else None."""
    if not _own_pair(sender, "send", "send_stored_event"):
        return None
    return cast(StoredEventSender, sender)


def _own_pair(sender: object, public: str, stored: str) -> bool:
    """Whether one class defines both methods and the instance replaces neither: a subclass
    or a patch that changes ``public`` may do anything to the events it is given, so it gets
    copies."""
    own = getattr(sender, "__dict__", None)
    if own and (public in own or stored in own):
        return False
    for klass in type(sender).__mro__:
        names = klass.__dict__  # read each call: a class patched later is seen at once
        has_public, has_stored = public in names, stored in names
        if has_public or has_stored:
            return has_public and has_stored and callable(getattr(sender, stored, None))
    return False
