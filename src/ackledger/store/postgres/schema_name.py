"""The PostgreSQL schema ackledger's objects go into: ``schema=``, or ``?schema=NAME`` in the
target's URL (libpq knows no such parameter, so it is taken out before connecting)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: An identifier PostgreSQL keeps as written once quoted: letters, digits and ``_``, at most
#: 63 bytes (longer names are cut short by the server), not one of the server's own.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema(value: object) -> str:
    """``value`` if it is a schema name ackledger accepts; ValueError naming it if not."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"schema: must be 1-63 letters, digits or '_', not starting with a digit, got {value!r}"
        )
    if value.lower().startswith("pg_") or value.lower() == "information_schema":
        raise ValueError(f"schema: {value!r} is reserved by PostgreSQL")
    return value


def quote_identifier(name: str) -> str:
    # check_schema has left no '"' in it.
    return f'"{name}"'


def split_schema(url: str, schema: str | None) -> tuple[str, str | None]:
    """``(url without its schema parameter, the schema)``; the keyword and the URL must agree
    when both name one."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    if len(named) > 1:
        raise ValueError("target: names ?schema= more than once")
    if named:
        in_url = check_schema(named[0])
        if schema is not None and check_schema(schema) != in_url:
            raise ValueError(f"schema: {schema!r}, but the target names ?schema={in_url}")
        schema = in_url
        rest = urlencode([(key, value) for key, value in query if key != "schema"])
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    elif schema is not None:
        schema = check_schema(schema)
    return url, schema
