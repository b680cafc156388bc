"""``ackledger relay`` as one of N (the drills' flags): bad input is one line and exit 2,
nothing written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ackledger.ops.processes import cli_command


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command("relay", *args),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


SINK = "http://127.0.0.1:9/events"
DOWN = "postgresql://postgres@127.0.0.1:1/x"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--to", SINK, "--owner", "w"], "--source"),
        (["--source", "{db}", "--to", "http://example.invalid/events", "--owner", "w"], "host"),
        (["--source", "{db}", "--to", "http://127.0.0.1:9/other?x=1", "--owner", "w"], "query"),
        (["--source", "{db}", "--to", SINK, "--owner", ""], "owner"),
        (["--source", "{missing}", "--to", SINK, "--owner", "w"], "no database"),
        (["--source", "{db}", "--to", SINK, "--owner", "w", "--lease-ttl", "0"], "lease-ttl"),
        (["--source", "{db}", "--to", SINK, "--stop-self-after-acks", "0"], "stop-self-after-acks"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    db = tmp_path / "source.db"
    db.write_bytes(b"")  # an existing (empty) file: only the other argument is wrong
    filled = [a.format(db=db, missing=tmp_path / "missing.db") for a in args]
    done = run(*filled)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert db.read_bytes() == b""
    assert not (tmp_path / "missing.db").exists()


def test_a_database_that_is_down_is_exit_4_in_one_line() -> None:
    # Not bad input: the same command may work once the server is up.
    done = run("--source", DOWN, "--to", SINK, "--owner", "w")
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("\n") == 1 and "database unavailable" in done.stderr
    assert "Traceback" not in done.stderr
