"""What the command line does with the targets it is given: it never prints a database
password, never adds our schema to a file that is not ours, and says in one line why it
cannot listen or run without an optional extra."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import sys
from pathlib import Path

import pytest

from ackledger import Inbox, Outbox
from ackledger.cli.arguments import open_outbox
from ackledger.ops.processes import run_cli
from tests.events import of
from tests.test_cli import assert_one_line_error

pytestmark = pytest.mark.slow

ORDER = {"id": "t-1", "sku": "pen", "qty": 2}


def _with_password(url: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


def test_status_and_trace_never_print_the_database_password(pg_url: str) -> None:
    # Trust authentication ignores the password, so the URL still opens the database.
    secret = "s3cret-pw"
    url = _with_password(pg_url, secret)
    with Outbox(url) as outbox:
        outbox.accept(ORDER)
        source = outbox.source
    with Inbox(url) as inbox:
        inbox.receive(of(ORDER, source=source))
    status = run_cli("status", "--source", url)
    trace = run_cli("trace", "t-1", "--source", url, "--sink", url)
    assert status.returncode == 0, status.stderr
    assert trace.returncode == 0, trace.stderr
    for result in (status, trace):
        assert secret not in result.stdout + result.stderr
    assert pg_url.split("://", 1)[1].split("/", 1)[0] in status.stdout  # user@host is shown
    # A postgresql:// sink is read as a database, not refused as a service URL.
    stages = {row[0]: row[1] for row in _trace_rows(trace.stdout)}
    assert stages["sink"] == "yes", trace.stdout


def _trace_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()[2::2]  # a title, a header, then a row and its detail per stage
    return [line.split() for line in lines]


def _fingerprint(path: Path) -> tuple[str, list[str]]:
    """The file's bytes and the files beside it (a -wal or -shm would show a write)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, sorted(os.listdir(path.parent))


@pytest.fixture
def foreign_db(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.close()
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["pending", "--source", "{db}"],
        ["status", "--source", "{db}"],
        ["quarantined", "--source", "{db}"],
        ["quarantine", "e1", "--source", "{db}", "--reason", "x"],
        ["requeue", "e1", "--source", "{db}"],
        ["purge", "--source", "{db}", "--sent-older-than", "1d"],
        ["dispatch", "--source", "{db}", "--to", "http://127.0.0.1:9/events"],
        ["trace", "e1", "--source", "{db}", "--sink", "http://127.0.0.1:9"],
        ["ledger", "purge", "--db", "{db}", "--older-than", "1d"],
    ],
)
def test_operating_commands_leave_a_file_that_is_not_ours_alone(
    foreign_db: Path, tmp_path: Path, command: list[str]
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    for target, words in ((foreign_db, "without ackledger's schema"), (empty, "is empty")):
        before = _fingerprint(target)
        result = run_cli(*(arg.format(db=target) for arg in command))
        assert_one_line_error(result, words)
        assert _fingerprint(target) == before


def test_trace_refuses_a_sink_file_that_is_not_ours(source_db: Path, foreign_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ORDER)
    before = _fingerprint(foreign_db)
    result = run_cli("trace", "t-1", "--source", str(source_db), "--sink", str(foreign_db))
    assert_one_line_error(result, "--sink", "without ackledger's schema")
    assert _fingerprint(foreign_db) == before


def test_after_migrate_the_same_file_is_an_outbox(foreign_db: Path) -> None:
    # The refusal names the way to add the schema on purpose; after it the file is ours.
    assert run_cli("migrate", "--target", str(foreign_db)).returncode == 0
    result = run_cli("pending", "--source", str(foreign_db), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    conn = sqlite3.connect(foreign_db)
    assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]
    conn.close()


def test_serve_says_in_one_line_why_it_cannot_listen(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = str(taken.getsockname()[1])
        token = tmp_path / "token"
        token.write_text("t0ken\n")
        for service in ("sink", "ledger"):
            db = tmp_path / f"{service}.db"
            busy = run_cli("serve", service, "--db", str(db), "--port", port)
            assert_one_line_error(busy, "cannot listen on 127.0.0.1:" + port)
            # A name beyond loopback needs a token first (CONTRACT v2 section 9), then a bind.
            wide = ["serve", service, "--db", str(db), "--host", "no-such.invalid"]
            assert_one_line_error(run_cli(*wide), "--host no-such.invalid", "--token-file")
            unknown = run_cli(*wide, "--token-file", str(token))
            assert_one_line_error(unknown, "cannot listen on no-such.invalid")
            assert not db.exists()  # refused before the database was opened
    finally:
        taken.close()


def test_a_missing_extra_is_named_instead_of_a_traceback(tmp_path: Path) -> None:
    # A folder first on the path whose "uvicorn" cannot be imported, as if the server extra
    # had not been installed.
    blocker = tmp_path / "blocked" / "uvicorn"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), *sys.path])}
    db = tmp_path / "sink.db"
    result = run_cli("serve", "sink", "--db", str(db), "--port", "0", env=env)
    assert_one_line_error(result, "'server' extra", "pip install 'ackledger[server]'")
    assert not db.exists()


def test_checking_a_target_keeps_the_locks_of_the_connections_already_open(
    source_db: Path,
) -> None:
    """POSIX drops every lock a process holds on a file when it closes ANY descriptor of it.
    `relay --pipeline` opens its second connection (the marks') while the first is open; the
    check of the target must not open and close the file itself, or the first connection's
    lock is gone, another process's close deletes the WAL under the relay, and committed
    events are lost (found by review: accept's events vanished, integrity_check failed)."""
    with Outbox(source_db) as reader:
        reader.accept(ORDER)
        marker = open_outbox(str(source_db))
        try:
            second = {"id": "t-2", "sku": "pen", "qty": 1}
            result = run_cli("accept", "--source", str(source_db), stdin=json.dumps(second))
            assert result.returncode == 0, result.stderr
            # The other process saw this one's lock and left the WAL in place for it.
            assert Path(f"{source_db}-wal").exists()
            assert [event["id"] for event in reader.pending()] == ["t-1", "t-2"]
            marker.mark_sent("t-2")
        finally:
            marker.close()
    conn = sqlite3.connect(source_db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT id, sent FROM ackledger_outbox ORDER BY seq").fetchall() == [
            ("t-1", 0),
            ("t-2", 1),
        ]
    finally:
        conn.close()
