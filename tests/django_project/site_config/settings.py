"""Settings of the test project. ``SHOP_DB`` is the database: a SQLite file path, or a
``postgresql://`` URL of a database on the local server."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

SECRET_KEY = "test-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "site_config.urls"
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ackledger.django",
    "shop",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "ackledger.django.IdempotencyMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def _database(url: str) -> dict[str, object]:
    if not url.startswith("postgresql://"):
        # manage.py test: a test database ackledger can open too (a file, not in memory).
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": url,
            "ATOMIC_REQUESTS": True,
            "TEST": {"NAME": url + ".test"},
            "OPTIONS": {"transaction_mode": "IMMEDIATE"},
        }
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "ATOMIC_REQUESTS": True,
    }


DATABASES = {"default": _database(os.environ["SHOP_DB"])}
# SHOP_LEDGER_DB: ackledger on an alias of its own, "ledger", reached through the router
# (unless SHOP_ROUTER is "none", to see the system check refuse that).
LEDGER_DB = os.environ.get("SHOP_LEDGER_DB")
if LEDGER_DB:
    DATABASES["ledger"] = _database(LEDGER_DB)
    if os.environ.get("SHOP_ROUTER") != "none":
        DATABASE_ROUTERS = ["ackledger.django.router.AckledgerRouter"]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ACKLEDGER = {
    "DATABASE": "ledger" if LEDGER_DB else "default",
    "HANDLERS": "shop.handlers:HANDLERS",
    # SHOP_IDEMPOTENCY: other options of the middleware, as JSON.
    "IDEMPOTENCY": json.loads(os.environ.get("SHOP_IDEMPOTENCY", '{"methods": ["POST"]}')),
}
TEST_RUNNER = "ackledger.django.test_runner.DiscoverRunner"
