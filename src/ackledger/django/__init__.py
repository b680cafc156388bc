"""ackledger as a Django app (``INSTALLED_APPS += ["ackledger.django"]``).

- ``python manage.py migrate`` makes ackledger's tables on the alias
  ``settings.ACKLEDGER["DATABASE"]`` (default ``"default"``), with ackledger's own migrator;
- ``publish(event)`` writes an event through that alias, inside the current
  ``transaction.atomic()``;
- ``receive(event)`` applies an event once with the handlers of
  ``settings.ACKLEDGER["HANDLERS"]``, its receipt and the handler's model writes in one
  ``transaction.atomic()``;
- ``python manage.py ackledger COMMAND ...`` runs the command line with the database taken
  from settings; the admin shows the outbox, the inbox and the ledger;
- ``IdempotencyMiddleware`` (``MIDDLEWARE += ["ackledger.django.IdempotencyMiddleware"]``)
  gives views the ``Idempotency-Key`` header.

Importing this package imports nothing of Django (its functions do, when called): the rest of
ackledger never needs it.
"""

from __future__ import annotations

from .middleware import IdempotencyMiddleware
from .receive import close_outboxes, publish, receive
from .target import database_target

__all__ = ["IdempotencyMiddleware", "close", "database_target", "publish", "receive"]


def close() -> None:
    """Close the connections ackledger opened of its own (the outbox ``publish`` reads its
    source from, the idempotency middleware's ledger); they are opened again when needed.
    A PostgreSQL database cannot be dropped while they are open: Django's test runner drops
    its test database at the end (``ackledger.django.test_runner.DiscoverRunner`` calls this
    first)."""
    from .middleware import close_middlewares

    close_outboxes()
    close_middlewares()
