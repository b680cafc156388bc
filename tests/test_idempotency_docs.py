"""Every example of docs/idempotency.md runs as written: each Python block in a fresh
interpreter, in an empty folder, with ``DATABASE_URL`` naming a new PostgreSQL database; the
blocks' own asserts are the checks, and the test reads the keys back itself."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from . import pg

PAGE = Path(__file__).resolve().parent.parent / "docs" / "idempotency.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_its_examples() -> None:
    assert len(python_blocks()) == 4


@pytest.mark.parametrize("number", range(4))
def test_an_example_runs(tmp_path: Path, number: int) -> None:
    name = pg.create_database()
    url = pg.url_for(name)
    try:
        block = python_blocks()[number]
        done = subprocess.run(
            [sys.executable, "-c", block],
            check=False,
            cwd=tmp_path,
            env={**os.environ, "DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"block {number + 1} failed:\n{done.stderr[-3000:]}"
        if number == 0:
            conn = sqlite3.connect(tmp_path / "shop.db")
            try:
                keys = conn.execute("SELECT key, state FROM ackledger_idempotency_keys").fetchall()
            finally:
                conn.close()
            assert keys == [("charge:o-1", "completed")]
            assert "refused:" in done.stdout
        else:
            keys = pg.rows(url, "SELECT state FROM ackledger_idempotency_keys")
            assert keys == [("completed",)]
    finally:
        pg.drop_database(name)
