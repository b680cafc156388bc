"""The Django app: its label is ``ackledger`` (the migration history's and the admin's)."""

from __future__ import annotations

from django.apps import AppConfig


class AckledgerConfig(AppConfig):
    name = "ackledger.django"
    label = "ackledger"
    verbose_name = "ackledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
