"""The inbox's first steps, before anything is written: validate the events and find each
one's handler.

A run of events is validated whole (one invalid event anywhere refuses all of it, naming its
place), then cut at its first event that no handler takes; what is left is a list of
:class:`Item`, each carrying its handler and fingerprint to ``apply.apply_runs``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import plugins
from .._core.printable import has_control
from ..envelope import fingerprint_of, validate_encoded
from ..errors import AckledgerError, InvalidEvent, NoHandler
from ..event_types import EventTypes, check_type_name
from ..store import Backend
from .apply import Item
from .handler_call import async_refused, check_handler, is_async_handler
from .handler_tx import Handler

__all__ = [
    "MAX_NAME_LENGTH",
    "InvalidItem",
    "Prepared",
    "Preparer",
    "UsersHandler",
    "check_name",
]

#: What ``handlers=`` takes: ``handler(tx, event)``, or ``handler(conn, event)`` with the
#: caller's own object for ``receive(event, using=conn)``; an ``async def`` one too.
UsersHandler = Callable[[Any, dict[str, Any]], object]

#: The longest inbox name.
MAX_NAME_LENGTH = 64

#: A prepared run: its events up to the first refused one, and that refusal.
Prepared = tuple[Sequence[Item], Exception | None]


def check_name(name: object) -> str:
    """An inbox's name as given, or a clear error saying what is wrong with it."""
    if not isinstance(name, str):
        raise TypeError(f"name: must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("name: must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"name: at most {MAX_NAME_LENGTH} characters, got {len(name)}")
    if has_control(name):
        raise ValueError(f"name: must not hold control characters, got {name!r}")
    return name


def _check_handlers(handlers: object) -> dict[str, Handler]:
    """The plug-ins' handlers (the lab's), replaced by the user's for the types they name."""
    found: dict[str, Handler] = plugins.handlers()
    if handlers is None:
        return found
    if not isinstance(handlers, Mapping):
        raise TypeError(
            f"handlers: must be a mapping of event type to handler, got {type(handlers).__name__}"
        )
    for name, handler in handlers.items():
        check_type_name(name, "handlers")
        check_handler(handler, f"handlers[{name!r}]")
        found[name] = handler
    return found


class InvalidItem(InvalidEvent):
    """An invalid event of a batch, which refuses the batch whole; ``index`` is its place."""

    def __init__(self, index: int, cause: InvalidEvent) -> None:
        super().__init__(str(cause), field=cause.field)
        self.index = index


class Preparer:
    """An inbox's handlers and event types, and the step that turns events into items."""

    def __init__(self, handlers: object, types: EventTypes | None) -> None:
        if types is not None and not isinstance(types, EventTypes):
            raise TypeError(f"types: must be an EventTypes, got {type(types).__name__}")
        self.handlers = _check_handlers(handlers)
        self.types = types if types is not None else EventTypes()
        built_in = plugins.handlers()
        #: The types whose handler is ``async def``: refused where nothing can await them.
        self.async_types = frozenset(
            name for name, handler in self.handlers.items() if is_async_handler(handler)
        )
        #: The types a plug-in's own handler applies: its tables are made by its first event.
        self.plugin_types = frozenset(
            name for name, handler in self.handlers.items() if handler is built_in.get(name)
        )
        #: Whether a handler is the user's (not a plug-in's, which never blocks for long).
        self.runs_user_code = len(self.plugin_types) < len(self.handlers)

    def item(self, db: Backend, obj: object, awaiting: bool) -> Item:
        """Validate ``obj`` and find its handler (InvalidEvent, NoHandler; an async handler
        where nothing awaits raises ``NotAwaited`` for the whole call)."""
        event, text = validate_encoded(obj, types=self.types)
        handler = self.handlers.get(event["type"])
        if handler is None:
            raise NoHandler(f"type: no handler for event type {event['type']!r} at this inbox")
        self._check_awaited(handler, event["type"], awaiting)
        if event["type"] in self.plugin_types:
            # A plug-in's tables: made by its first event, not by opening.
            db.ensure_plugin(event["type"])
        return Item(event, fingerprint_of(event, text), handler, (event["source"], event["id"]))

    def run(self, db: Backend, events: Sequence[object], awaiting: bool) -> Prepared:
        """The events before the first unhandled one, prepared, and its error. The run is
        validated whole first: one invalid event anywhere refuses all of it (InvalidItem),
        so nothing of a batch with a malformed item is applied."""
        items: list[Item] = []
        refused: AckledgerError | None = None
        for index, obj in enumerate(events):
            try:
                if refused is None:
                    items.append(self.item(db, obj, awaiting))
                else:
                    validate_encoded(obj, types=self.types)
            except InvalidEvent as exc:
                # Alone, the event's own refusal; in a batch, naming its place.
                return [], exc if len(events) == 1 else InvalidItem(index, exc)
            except AckledgerError as exc:
                refused = exc
        return items, refused

    def prepared_item(self, item: Item, awaiting: bool) -> Prepared:
        """An event ``Inbox.read_lone`` prepared, as a run of its own."""
        self._check_awaited(item.handler, item.event["type"], awaiting)
        return [item], None

    def _check_awaited(self, handler: Handler, event_type: str, awaiting: bool) -> None:
        """An ``async def`` handler where nothing awaits: ``NotAwaited`` for the whole call."""
        if not awaiting and event_type in self.async_types:
            raise async_refused(handler, event_type)
