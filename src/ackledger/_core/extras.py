"""Optional dependencies: which extra (pyproject.toml) installs each, and the error that says
so. The core imports none of them; a feature that needs one imports it when first used, and a
missing one is reported as the extra to install, never as a bare ``ModuleNotFoundError``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import AckledgerError

#: The optional dependencies' top-level modules, by the extra that installs them.
EXTRA_OF_MODULE = {
    "starlette": "server",
    "uvicorn": "server",
    "httptools": "server",
    "prometheus_client": "server",
    "anyio": "server",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "pika": "amqp",
    "nats": "nats",
    "opentelemetry": "otel",
    "jinja2": "console",
}


class MissingExtra(AckledgerError, ModuleNotFoundError):
    """This needs an extra that is not installed (``name``: the module that is missing)."""


def missing_extra(exc: ModuleNotFoundError, what: str) -> MissingExtra | None:
    """The error naming the extra that provides the module ``exc`` misses, or None when that
    module belongs to no extra (a real bug, to be raised as it is)."""
    extra = EXTRA_OF_MODULE.get((exc.name or "").partition(".")[0])
    if extra is None:
        return None
    missing = MissingExtra(
        f"{what} needs the '{extra}' extra, which is not installed (no module "
        f"{exc.name!r}): pip install 'ackledger[{extra}]'"
    )
    missing.name = exc.name
    return missing


@contextmanager
def needing_extra(what: str) -> Iterator[None]:
    """Run the block; a module of an extra missing in it raises ``MissingExtra`` for ``what``
    (the feature, as a user names it: ``amqp:// targets``, ``Inbox.asgi()``)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, what)
        if missing is None:
            raise
        raise missing from None
