"""System checks: ``settings.ACKLEDGER`` names what exists, and ackledger's alias is one
ackledger can live in, reached by its models (the router) when it is not ``"default"``."""

from __future__ import annotations

from typing import Any

from django.core import checks

from . import config
from .router import AckledgerRouter
from .target import database_target

ROUTER = "ackledger.django.router.AckledgerRouter"


@checks.register(checks.Tags.database, deploy=False)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.conf import settings
    from django.utils.module_loading import import_string

    errors: list[checks.CheckMessage] = []
    try:
        name = config.alias()
        database_target(name)
        config.handlers()
        config.idempotency_options()
    except (ValueError, TypeError) as exc:
        return [checks.Error(str(exc), id="ackledger.E001")]
    if name != config.DEFAULT_ALIAS:
        routers = [
            import_string(r) if isinstance(r, str) else r
            for r in getattr(settings, "DATABASE_ROUTERS", [])
        ]
        if not any(r is AckledgerRouter or isinstance(r, AckledgerRouter) for r in routers):
            errors.append(
                checks.Error(
                    f"settings.ACKLEDGER['DATABASE'] is {name!r}: add {ROUTER!r} to "
                    "DATABASE_ROUTERS so that ackledger's models and migration use it",
                    id="ackledger.E002",
                )
            )
    return errors
