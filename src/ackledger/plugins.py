"""Domains plugged into the core: an event type that brings its own schema and handler.

A plug-in registers itself when its module is imported (``ackledger`` imports the lab,
``ackledger.warehouse``, so its type is always there). Every ``EventTypes`` starts with the
plug-ins' schemas and every ``Inbox`` with their handlers; a user's own registration of the
same type replaces the handler, as any user handler would. The core names no plug-in: it
asks this registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``check(data) -> data``: an event type's schema (``event_types.Check``).
Check = Callable[[Any], Any]
#: ``handler(tx, event)``: the type's effect in the inbox's transaction (``handler_tx.Handler``).
Handler = Callable[..., Any]
#: ``former(event) -> fingerprint or None``: what an older version of ackledger stored as the
#: event's fingerprint, for an event such a version could have stored (its receipt or outbox
#: row is then the same event, not a conflict).
Former = Callable[[Mapping[str, Any]], "str | None"]


def _no_former(event: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class Plugin:
    type: str
    check: Check
    handler: Handler
    former: Former = _no_former
    #: The calls the contract keeps on ``Outbox`` and ``Inbox`` for this domain (``accept``,
    #: ``stock``, ``order``), by name; the reference domain has them, a user's need not.
    calls: Mapping[str, Callable[..., Any]] | None = None
    #: ``tables(dialect) -> script``: the plug-in's own tables, as statements that each create
    #: only what is missing (``CREATE TABLE IF NOT EXISTS``); the store runs them under its
    #: schema lock when the plug-in's first call or event reaches a database
    #: (``Backend.ensure_plugin``), never when a database is opened.
    tables: Callable[[str], str] | None = None


_PLUGINS: dict[str, Plugin] = {}


def register(plugin: Plugin) -> None:
    """Register ``plugin`` (once per type: a module imported again registers nothing new)."""
    _PLUGINS.setdefault(plugin.type, plugin)


def checks() -> dict[str, Check]:
    """A new dict of every plug-in's schema by type."""
    return {name: plugin.check for name, plugin in _PLUGINS.items()}


def handlers() -> dict[str, Handler]:
    """A new dict of every plug-in's handler by type."""
    return {name: plugin.handler for name, plugin in _PLUGINS.items()}


def former_fingerprint(event: Mapping[str, Any]) -> str | None:
    """The fingerprint an older version stored for ``event``, if its type's plug-in knows one."""
    plugin = _PLUGINS.get(event.get("type"))  # type: ignore[arg-type]
    return None if plugin is None else plugin.former(event)


def tables_script(type_name: str, dialect: str) -> str | None:
    """The script of the tables of the plug-in of ``type_name`` for ``dialect``, or None when
    no plug-in of that type has tables of its own."""
    plugin = _PLUGINS.get(type_name)
    return None if plugin is None or plugin.tables is None else plugin.tables(dialect)


def with_tables() -> list[str]:
    """The types of the plug-ins that have tables of their own, in registration order."""
    return [name for name, plugin in _PLUGINS.items() if plugin.tables is not None]


def call(name: str) -> Callable[..., Any]:
    """The plug-in call ``name`` (the reference domain's ``accept``, ``stock``, ``order``)."""
    for plugin in _PLUGINS.values():
        if plugin.calls is not None and name in plugin.calls:
            return plugin.calls[name]
    raise LookupError(f"no plug-in offers {name!r}: the reference domain is not registered")
