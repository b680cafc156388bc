"""ackledger's schema migration 0012 (inboxes with names), run by ackledger's own migrator as
0001 runs the ones before it."""

from __future__ import annotations

import importlib

from django.db import migrations

# The same step as 0001's (a module whose name starts with a digit is imported by name).
upgrade = importlib.import_module("ackledger.django.migrations.0001_initial").upgrade

#: The newest of ackledger's own schema migrations when this one was written.
SCHEMA_VERSION = 12


class Migration(migrations.Migration):
    # ackledger's migrator runs its own transactions on its own connection.
    atomic = False
    dependencies = [("ackledger", "0001_initial")]
    operations = [migrations.RunPython(upgrade, migrations.RunPython.noop)]
