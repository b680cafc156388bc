"""Event types and their schemas: which ``data`` an event of a given ``type`` may carry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from . import plugins
from ._core.printable import is_printable
from .errors import InvalidEvent

#: A schema: takes an event's ``data`` (a plain JSON value, the checker's own copy) and
#: returns the data to keep, or raises InvalidEvent naming the field relative to ``data``.
Check = Callable[[Any], Any]

#: The longest event type (and id, and subject): CloudEvents sets no bound, this one keeps
#: a log line and an index key small.
MAX_NAME = 256


def check_type_name(value: object, where: str = "type") -> str:
    """Return ``value`` as a plain str if it is an event type: 1-256 printable characters
    (``com.example.order.placed``, ``/orders/placed``, any other the sender chose)."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{where}: must be a string, got {type(value).__name__}", field=where)
    value = str.__str__(value)
    if not 1 <= len(value) <= MAX_NAME:
        raise InvalidEvent(
            f"{where}: must be 1-{MAX_NAME} characters, got {len(value)}", field=where
        )
    if not is_printable(value):
        raise InvalidEvent(f"{where}: must hold printable characters only", field=where)
    return value


class EventTypes:
    """A registry of event types with a schema each; the plug-ins' types (the lab's
    ``warehouse.stock.added``) are always in it.

    ``check(type, data)`` runs the type's schema; a type that was not registered passes
    as it is (a source may publish any type; a sink decides by its handlers).
    """

    def __init__(self) -> None:
        # The plug-ins' schemas (the lab's type is one), registered when they were imported.
        self._checks: dict[str, Check] = plugins.checks()
        #: ``schema(name)``: the schema registered for ``name``, or None; ``check`` without
        #: the restatement of a refusal for the whole event (the fast path takes any refusal
        #: the full way). The registry's own ``get``: no Python frame per event.
        self.schema: Callable[[str], Check | None] = self._checks.get

    def register(self, name: str, check: Check) -> None:
        """Give the type ``name`` the schema ``check``. A name is registered once: a second
        registration (the reference type's included) raises ValueError, as silently
        replacing a schema would change what an existing registration accepts."""
        name = check_type_name(name, "name")
        if not callable(check):
            raise TypeError(f"check must be callable, got {type(check).__name__}")
        if name in self._checks:
            raise ValueError(f"event type {name!r} is already registered")
        self._checks[name] = check

    def __contains__(self, name: object) -> bool:
        return name in self._checks

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._checks))

    def check(self, name: str, data: Any) -> Any:
        """Return ``data`` as the schema of ``name`` returns it, or ``data`` itself when the
        type has no schema. A refusal's field is named from the event: ``data.<field>``."""
        check = self._checks.get(name)
        if check is None:
            return data
        try:
            return check(data)
        except InvalidEvent as refused:
            raise _within_data(refused) from refused


def _within_data(refused: InvalidEvent) -> InvalidEvent:
    """The schema's refusal restated for the whole event: field ``sku`` becomes ``data.sku``
    (its message "sku: ..." becomes "data.sku: ..."); one naming no field names ``data``."""
    message = str(refused)
    if refused.field is None:
        return InvalidEvent(f"data: {message}", field="data")
    field = f"data.{refused.field}"
    prefix = f"{refused.field}: "
    reason = message[len(prefix) :] if message.startswith(prefix) else message
    return InvalidEvent(f"{field}: {reason}", field=field)
