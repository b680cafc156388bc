"""The user's handlers, named as ``MODULE:ATTR`` (``serve sink --handlers``, ``consume``,
``verify``), the way uvicorn names an app.

``ATTR`` names a mapping of event type to handler; every way that naming can go wrong is
found here, when the service starts, with a message that says what to fix, and not when the
first event of a type arrives.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ..errors import InvalidEvent
from ..event_types import check_type_name

__all__ = ["Handler", "HandlerSpecError", "load_handlers", "load_object"]

from .handler_call import check_handler
from .handler_tx import Handler

_FORM = "must be MODULE:ATTR (a module and its dict of handlers, e.g. myapp.events:HANDLERS)"


class HandlerSpecError(ValueError):
    """A ``MODULE:ATTR`` that does not name a usable dict of handlers; the message says why."""


def load_handlers(spec: str) -> dict[str, Handler]:
    """Import ``MODULE`` and return a new dict of the handlers that ``ATTR`` names.

    ``MODULE`` may be dotted (a package's module), ``ATTR`` too (an attribute of an attribute).
    Raises :class:`HandlerSpecError` for a malformed spec, a module that is not found or whose
    import raised, a missing attribute, a value that is not a mapping, a key that is not an
    event type name, or a handler that is not callable with ``(tx, event)``.
    """
    found = load_object(spec, "handlers", _FORM)
    where = f"handlers {spec!r}"
    if not isinstance(found, Mapping):
        raise HandlerSpecError(
            f"{where}: must be a dict of event type to handler, got {type(found).__name__}"
        )
    handlers: dict[str, Handler] = {}
    for key, handler in found.items():
        try:
            name = check_type_name(key, f"{where}: key {key!r}")
        except InvalidEvent as refused:
            raise HandlerSpecError(str(refused)) from None
        _check_callable(handler, f"{where}: the handler of {name!r}")
        handlers[name] = handler
    return handlers


def load_object(spec: object, what: str, form: str) -> object:
    """What ``MODULE:ATTR`` names (``what`` and ``form`` say in messages what it is for and
    how it is written); ``HandlerSpecError`` for a malformed spec, a module that is not found
    or whose import raised, or a missing attribute."""
    if not isinstance(spec, str):
        raise HandlerSpecError(f"{what}: {form}, got {type(spec).__name__}")
    where = f"{what} {spec!r}"
    module_name, colon, attr_path = spec.partition(":")
    if not colon:
        raise HandlerSpecError(f"{where}: no ':' in it; {form}")
    if not _dotted(module_name) or not _dotted(attr_path):
        raise HandlerSpecError(f"{where}: {form}")
    found: object = _import(module_name, where)
    walked: list[str] = []
    for part in attr_path.split("."):
        walked.append(part)
        try:
            found = getattr(found, part)
        except AttributeError:
            raise HandlerSpecError(
                f"{where}: module {module_name!r} has no attribute {'.'.join(walked)!r}"
            ) from None
    return found


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _import(module_name: str, where: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Not found is the module itself or a package on its path; a module that is found
        # but imports a missing one is a failing import, and says which one it lacked.
        missing = exc.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            looked = "" if missing == module_name else f" (looking for {module_name!r})"
            raise HandlerSpecError(
                f"{where}: no module named {missing!r}{looked} on the import path"
            ) from None
        raise HandlerSpecError(_raised(where, module_name, exc)) from None
    except Exception as exc:
        raise HandlerSpecError(_raised(where, module_name, exc)) from None


def _raised(where: str, module_name: str, exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{where}: importing {module_name!r} raised {type(exc).__name__}" + (
        f": {first}" if first else ""
    )


def _check_callable(handler: object, what: str) -> None:
    try:
        check_handler(handler, what)
    except TypeError as exc:
        raise HandlerSpecError(str(exc)) from None
