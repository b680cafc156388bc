"""What is particular to the PostgreSQL backend: settings, names, placeholders, laziness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ackledger.store import open_backend
from ackledger.store.postgres import redact, to_pyformat

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(("mode", "setting"), [("FULL", "on"), ("NORMAL", "off")])
def test_synchronous_maps_to_synchronous_commit(pg_url: str, mode: str, setting: str) -> None:
    backend = open_backend(pg_url, synchronous=mode)
    try:
        with backend.write() as tx:
            assert tx.scalar("SHOW synchronous_commit") == setting
        with backend.read() as tx:
            assert tx.scalar("SHOW transaction_isolation") == "repeatable read"
            assert tx.scalar("SHOW transaction_read_only") == "on"
        with backend.write() as tx:
            assert tx.scalar("SHOW transaction_isolation") == "read committed"
    finally:
        backend.close()


def test_location_never_shows_the_password() -> None:
    assert redact("postgresql://app:s3cret@db:5432/orders") == "postgresql://app@db:5432/orders"
    assert redact("postgresql://app@db/orders?password=s3cret&sslmode=require") == (
        "postgresql://app@db/orders?sslmode=require"
    )


def test_placeholders_are_rewritten_and_percent_signs_kept() -> None:
    assert to_pyformat("SELECT ? WHERE a LIKE '10%' AND b = ?") == (
        "SELECT %s WHERE a LIKE '10%%' AND b = %s"
    )


def test_a_closed_backend_refuses_work(pg_url: str) -> None:
    backend = open_backend(pg_url)
    backend.close()
    with pytest.raises(RuntimeError, match="closed"), backend.read():
        pass


def test_sqlite_users_never_import_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys, ackledger, ackledger.relay.partitions, ackledger.cli\n"
        f"ob = ackledger.Outbox({str(tmp_path / 'x.db')!r}); ob.accept("
        "{'id': 'a', 'sku': 'b', 'qty': 1}); ob.close()\n"
        "assert 'psycopg' not in sys.modules, 'psycopg was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
