"""Every example of docs/integrations/ runs as written, against a real database.

Each page's Python blocks run in order in one fresh interpreter (a page is one story), in an
empty folder, with ``DATABASE_URL`` naming a new PostgreSQL database; the example's own
asserts are the checks, and the test then reads the database itself to see that the business
row and the event committed together.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from . import pg

DOCS = Path(__file__).resolve().parent.parent / "docs" / "integrations"
PAGES = ("sqlite3", "psycopg", "sqlalchemy", "django")


def python_blocks(page: str) -> list[str]:
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_page(page: str, cwd: Path, url: str) -> None:
    for number, block in enumerate(python_blocks(page), 1):
        done = subprocess.run(
            [sys.executable, "-c", block],
            check=False,
            cwd=cwd,
            env={**os.environ, "DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{page}.md block {number} failed:\n{done.stderr[-3000:]}"


def test_every_integration_page_has_examples() -> None:
    for page in PAGES:
        assert python_blocks(page), page
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"({page}.md)" in index


def test_sqlite3_page(tmp_path: Path) -> None:
    run_page("sqlite3", tmp_path, "postgresql://unused.invalid/none")
    conn = sqlite3.connect(tmp_path / "shop.db")
    try:
        orders = conn.execute("SELECT id FROM shop_orders ORDER BY id").fetchall()
        events = conn.execute(
            "SELECT id, source, type FROM ackledger_outbox ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()
    # The rolled-back order left neither its row nor its event.
    assert orders == [("o-1001",)]
    assert events == [("o-1001", "/orders-service", "com.example.order.placed")]


# django.md is a whole project (an installed app): tests/test_django_docs.py builds and runs it.
@pytest.mark.parametrize("page", ["psycopg", "sqlalchemy"])
def test_postgres_pages(page: str, tmp_path: Path, pg_empty_url: str) -> None:
    run_page(page, tmp_path, pg_empty_url)
    orders = {row[0] for row in pg.rows(pg_empty_url, "SELECT id FROM shop_orders")}
    events = {
        row[0] for row in pg.rows(pg_empty_url, "SELECT id FROM ackledger_outbox WHERE sent = 0")
    }
    assert orders and orders == events
