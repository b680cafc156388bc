"""``serve sink --django`` and ``consume --django``: the inbox on Django's connection of
ackledger's alias, each transaction a ``transaction.atomic()``, handlers from settings.

``python manage.py ackledger serve sink|consume`` asks for it by itself (``commands``)."""

from __future__ import annotations

import functools
import os
from typing import Any

from ..sink.session_factory import Savepoint, SessionInbox, Work, no_flush
from ..store.place import check_same_place, place_of_target
from .config import alias, handlers
from .target import database_target


class DjangoTransactions:
    """One ``transaction.atomic()`` on the alias per transaction; handlers get its
    connection (each thread has its own, as Django gives one per thread)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def run(self, work: Work, awaiter: Any) -> Any:
        from django.db import close_old_connections, connections, transaction

        # A long-running process: a connection past CONN_MAX_AGE or broken is replaced, as
        # Django does between requests.
        close_old_connections()
        name = self._name
        connection = connections[name]
        savepoint: Savepoint = functools.partial(transaction.atomic, using=name)
        with transaction.atomic(using=name):
            # Django's ORM writes as each call runs: nothing is left pending to flush.
            return work(connection, connection, awaiter, savepoint, no_flush)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()


def django_inbox(
    settings_module: str, db: str, given: dict[str, Any] | None, synchronous: str
) -> SessionInbox:
    """``django.setup()`` with ``settings_module``, then the inbox on ackledger's alias, which
    must be the ``db`` database; ``given`` handlers, else those of the settings."""
    import django
    from django.apps import apps

    if not apps.ready:
        # From the command line; under manage.py Django is set up already.
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
        django.setup()
    name = alias()
    target = database_target(name)
    check_same_place(
        place_of_target(target), f"Django's database {name!r} (settings.ACKLEDGER)", db
    )
    return SessionInbox(
        db,
        transactions=DjangoTransactions(name),
        handlers=given if given is not None else handlers(),
        synchronous=synchronous,
    )
