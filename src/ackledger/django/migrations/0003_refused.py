"""ackledger's schema 13: the refused messages' table (``ackledger_refused``), made by
ackledger's own migrator, and its model for the admin."""

from __future__ import annotations

import importlib

from django.db import migrations, models

# The first migration's steps (its module's name starts with a digit: no import statement).
_initial = importlib.import_module("ackledger.django.migrations.0001_initial")

#: The newest of ackledger's own schema migrations this one brings (see 0001_initial).
SCHEMA_VERSION = 13


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("ackledger", "0002_inbox_names")]
    operations = [
        migrations.RunPython(_initial.upgrade, migrations.RunPython.noop),
        _initial.unmanaged(
            "RefusedMessage",
            ("refused_no", models.BigIntegerField(primary_key=True, serialize=False)),
            "ackledger_refused",
            ordering=["-refused_no"],
            verbose_name="refused message",
        ),
    ]
