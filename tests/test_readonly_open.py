"""Reading commands open an up-to-date SQLite database without writing: another process's
ordinary ``BEGIN IMMEDIATE`` (a relay marking, a service applying) does not hold them up."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger import Inbox, Outbox
from ackledger.ops.processes import run_cli
from ackledger.store import open_backend
from ackledger.store.base import migrate, migrations, schema_versions
from tests.conftest import raw_rows

#: Shorter than the backend's 30 s busy time-out: a command that waits for the lock fails the
#: test by timing out instead of answering after the holder lets go.
ANSWER_WITHIN_S = 20

_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE ackledger_outbox SET attempts = attempts WHERE 0")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@pytest.fixture
def held(source_db: Path, sink_db: Path) -> Iterator[Path]:
    """``source_db`` with two events, under a write lock held by another process."""
    with Outbox(source_db) as outbox:
        outbox.accept({"id": "o-1", "sku": "pen", "qty": 1})
        outbox.accept({"id": "o-2", "sku": "pen", "qty": 2})
    with Inbox(sink_db):
        pass
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(source_db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        yield source_db
        holder.stdin.write("\n")  # let go; the with block closes the pipes and waits


@pytest.mark.slow
def test_pending_status_trace_quarantined_answer_under_another_write_lock(
    held: Path, sink_db: Path
) -> None:
    src = str(held)
    pending = run_cli("pending", "--source", src, "--json", timeout=ANSWER_WITHIN_S)
    assert pending.returncode == 0, pending.stderr
    assert [item["id"] for item in json.loads(pending.stdout)] == ["o-1", "o-2"]
    status = run_cli("status", "--source", src, "--json", timeout=ANSWER_WITHIN_S)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["pending"] == 2
    traced = run_cli(
        "trace", "o-1", "--source", src, "--sink", str(sink_db), "--json", timeout=ANSWER_WITHIN_S
    )
    assert traced.returncode == 0, traced.stderr
    assert json.loads(traced.stdout)["stages"][1]["state"] == "pending"
    listing = run_cli("quarantined", "--source", src, "--json", timeout=ANSWER_WITHIN_S)
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout) == []


def test_opening_an_up_to_date_database_writes_nothing(held: Path) -> None:
    # In-process too: the library's own open takes no write lock either.
    with Outbox(held) as outbox:
        assert [item["id"] for item in outbox.pending(16)] == ["o-1", "o-2"]


def test_an_old_schema_is_still_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    # The version before the newest (version numbers need not follow one another).
    previous = migrations("sqlite")[-2][0]
    backend = open_backend(path, migrate_schema=False)
    try:
        migrate(backend, upto=previous)
        assert schema_versions(backend)[-1][0] == previous
    finally:
        backend.close()
    with Outbox(path) as outbox:
        outbox.accept({"id": "o-1", "sku": "pen", "qty": 1})
    versions = [
        int(str(row[0]))
        for row in raw_rows(path, "SELECT version FROM ackledger_schema_migrations")
    ]
    assert versions == [version for version, _, _ in migrations("sqlite")]
