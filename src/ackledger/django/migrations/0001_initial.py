"""ackledger's tables, made by ackledger's own migrator on the alias
``settings.ACKLEDGER["DATABASE"]``: the statements are never copied here, so a database that
``ackledger migrate`` (or a service) already made is adopted as it is, and a later ackledger
version's migrations are applied the same way by its own Django migration."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

#: The newest of ackledger's own schema migrations when this one was written. A release that
#: adds one ships a Django migration that runs ``upgrade`` again and names the new number
#: (tests/test_django_app.py holds the newest Django migration to it).
SCHEMA_VERSION = 11


def upgrade(apps: Any, schema_editor: Any) -> None:
    from ackledger.django.config import alias
    from ackledger.django.target import database_target
    from ackledger.source.outbox import Outbox
    from ackledger.store.schema import upgrade_schema

    name = schema_editor.connection.alias
    if name != alias():
        return
    target = database_target(name)
    upgrade_schema(target)
    # The outbox's source (its events' identity) is stored once, now, so that the first
    # publish inside a request's transaction has nothing to write on a connection of its own.
    Outbox(target).close()


def unmanaged(
    name: str, pk: tuple[str, models.Field[Any, Any]], table: str, **options: Any
) -> migrations.CreateModel:
    # Django tracks no columns of an unmanaged model: its key and its options are enough.
    return migrations.CreateModel(
        name=name, fields=[pk], options={"managed": False, "db_table": table, **options}
    )


class Migration(migrations.Migration):
    # ackledger's migrator runs its own transactions on its own connection.
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.RunPython(upgrade, migrations.RunPython.noop),
        unmanaged(
            "OutboxEvent",
            ("seq", models.BigIntegerField(primary_key=True, serialize=False)),
            "ackledger_outbox",
            ordering=["-seq"],
            verbose_name="outbox event",
        ),
        unmanaged(
            "InboxReceipt",
            ("event_id", models.TextField("id", db_column="id", primary_key=True, serialize=False)),
            "ackledger_inbox",
            ordering=["-first_received_at"],
            verbose_name="inbox receipt",
        ),
        unmanaged(
            "Delivery",
            ("delivery_no", models.BigIntegerField(primary_key=True, serialize=False)),
            "ackledger_deliveries",
            ordering=["-delivery_no"],
            verbose_name_plural="deliveries",
        ),
        unmanaged(
            "Attempt",
            ("attempt_no", models.BigIntegerField(primary_key=True, serialize=False)),
            "ackledger_attempts",
            ordering=["-attempt_no"],
        ),
    ]
