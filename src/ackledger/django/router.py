"""``DATABASE_ROUTERS = ["ackledger.django.router.AckledgerRouter"]``: ackledger's models
read from, and its migration runs on, the alias ``settings.ACKLEDGER["DATABASE"]`` only.
Needed when that alias is not ``"default"`` (a system check says so)."""

from __future__ import annotations

from typing import Any

from .config import alias

LABEL = "ackledger"


class AckledgerRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return alias() if model._meta.app_label == LABEL else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return alias() if model._meta.app_label == LABEL else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == LABEL:
            return db == alias()
        return None
