"""``TEST_RUNNER = "ackledger.django.test_runner.DiscoverRunner"``: Django's runner, which
first closes ackledger's own connections to the test database, so that PostgreSQL lets the
runner drop it at the end."""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from . import close


class DiscoverRunner(DjangoDiscoverRunner):
    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close()
        super().teardown_databases(old_config, **kwargs)
