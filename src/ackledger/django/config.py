"""``settings.ACKLEDGER``: where ackledger lives in a Django project, and its options.

Read on each call, never cached at import: Django's test runner and ``override_settings``
change settings after this module is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..sink.handler_call import check_handler

DEFAULT_ALIAS = "default"
#: Every key ``settings.ACKLEDGER`` may hold; anything else is a typo worth refusing.
KNOWN_KEYS = frozenset({"DATABASE", "HANDLERS", "IDEMPOTENCY"})


class ImproperlyConfiguredError(ValueError):
    """``settings.ACKLEDGER`` names something that does not exist or cannot be used."""


def options() -> Mapping[str, Any]:
    from django.conf import settings

    found = getattr(settings, "ACKLEDGER", None) or {}
    if not isinstance(found, Mapping):
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER: must be a dict, got {type(found).__name__}"
        )
    unknown = sorted(set(found) - KNOWN_KEYS)
    if unknown:
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER: unknown key(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    return found


def alias() -> str:
    """The database alias ackledger's tables live on (``ACKLEDGER["DATABASE"]``)."""
    from django.conf import settings

    name = options().get("DATABASE", DEFAULT_ALIAS)
    if not isinstance(name, str) or name not in settings.DATABASES:
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['DATABASE']: {name!r} is not an alias of settings.DATABASES "
            f"({', '.join(sorted(settings.DATABASES))})"
        )
    return name


def handlers_spec() -> str | None:
    spec = options().get("HANDLERS")
    if spec is not None and not isinstance(spec, str):
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['HANDLERS']: must be 'module:ATTRIBUTE', got {type(spec).__name__}"
        )
    return spec


def handlers() -> dict[str, Any]:
    """The handlers ``ACKLEDGER["HANDLERS"]`` names (``"app.module:HANDLERS"``, a dict of
    event type to ``handler(connection, event)``); empty when unset."""
    spec = handlers_spec()
    if spec is None:
        return {}
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['HANDLERS']: must be 'module:ATTRIBUTE', got {spec!r}"
        )
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['HANDLERS']: cannot load {spec!r} ({exc})"
        ) from exc
    if not isinstance(found, Mapping):
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['HANDLERS']: {spec!r} must be a dict of event type to "
            f"handler, got {type(found).__name__}"
        )
    for name, handler in found.items():
        check_handler(handler, f"settings.ACKLEDGER['HANDLERS'][{name!r}]")
    return dict(found)


#: The options of ``ACKLEDGER["IDEMPOTENCY"]``: those of ``ackledger.IdempotencyMiddleware``.
IDEMPOTENCY_OPTIONS = frozenset({"methods", "required", "ttl", "lease", "scope"})


def idempotency_options() -> dict[str, Any]:
    """``ACKLEDGER["IDEMPOTENCY"]``: the keyword options of the idempotency middleware, by
    their lower-case names."""
    found = options().get("IDEMPOTENCY") or {}
    if not isinstance(found, Mapping):
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['IDEMPOTENCY']: must be a dict, got {type(found).__name__}"
        )
    named = {str(name).lower(): value for name, value in found.items()}
    unknown = sorted(set(named) - IDEMPOTENCY_OPTIONS)
    if unknown:
        raise ImproperlyConfiguredError(
            f"settings.ACKLEDGER['IDEMPOTENCY']: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(IDEMPOTENCY_OPTIONS))})"
        )
    return named
