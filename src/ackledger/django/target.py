"""The database of a Django alias as ackledger's targets name it: the SQLite file's path, or
a ``postgresql://`` URL built from the alias's settings (so nothing is typed twice)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from .config import ImproperlyConfiguredError, alias

_SQLITE = "django.db.backends.sqlite3"
_POSTGRES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")


def database_target(name: str | None = None) -> str:
    """The target of alias ``name`` (default: ``ACKLEDGER["DATABASE"]``), as Django's
    connection of that alias reaches it now (the test runner's test database included)."""
    from django.db import connections

    settings_dict: dict[str, Any] = connections[name or alias()].settings_dict
    return target_of(settings_dict, name or alias())


def target_of(settings_dict: dict[str, Any], name: str) -> str:
    engine = settings_dict.get("ENGINE", "")
    if engine == _SQLITE:
        path = str(settings_dict.get("NAME") or "")
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ImproperlyConfiguredError(
                f"DATABASES[{name!r}]: ackledger needs a SQLite file, got {path!r} (an "
                "in-memory database cannot be shared with the relay and the sink; for tests, "
                "set TEST['NAME'] to a file path)"
            )
        return path
    if engine in _POSTGRES:
        return _postgres_url(settings_dict)
    raise ImproperlyConfiguredError(
        f"DATABASES[{name!r}]: ENGINE {engine!r}: ackledger lives in SQLite or PostgreSQL"
    )


def _postgres_url(settings_dict: dict[str, Any]) -> str:
    user = str(settings_dict.get("USER") or "")
    password = str(settings_dict.get("PASSWORD") or "")
    host = str(settings_dict.get("HOST") or "")
    port = str(settings_dict.get("PORT") or "")
    name = str(settings_dict.get("NAME") or "")
    credentials = ""
    if user:
        credentials = quote(user, safe="")
        if password:
            credentials += ":" + quote(password, safe="")
        credentials += "@"
    # A host that is a socket directory goes into the query, as libpq reads it.
    query: dict[str, str] = {}
    where = host
    if host.startswith("/"):
        query["host"] = host
        where = ""
    if port:
        where += f":{port}"
    schema = (settings_dict.get("OPTIONS") or {}).get("ackledger_schema")
    if schema:
        query["schema"] = str(schema)
    url = f"postgresql://{credentials}{where}/{quote(name, safe='')}"
    return url + ("?" + urlencode(query) if query else "")
