"""A refusal (exit 2) leaves no file behind: a path that is not a database (a device, a FIFO,
a link to one, another program's file) is refused before SQLite creates a journal beside it,
and bad input is refused before a new database is created."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.processes import run_cli
from tests.test_cli import assert_one_line_error

ORDER = json.dumps({"id": "o-1", "sku": "pen", "qty": 1})


def _listing(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


@pytest.mark.parametrize("command", ["accept", "publish"])
def test_a_link_to_a_device_is_refused_and_nothing_is_created_beside_it(
    tmp_path: Path, command: str
) -> None:
    link = tmp_path / "full.db"
    link.symlink_to("/dev/full")  # today's `--source /dev/full` left /dev/full-journal
    event = ORDER if command == "accept" else json.dumps({"id": "e-1", "type": "t.x"})
    result = run_cli(command, "--source", str(link), stdin=event, timeout=30)
    assert_one_line_error(result, "not a regular file")
    assert _listing(tmp_path) == ["full.db"]


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    for args in (["accept", "--source", str(fifo)], ["migrate", "--target", str(fifo)]):
        result = run_cli(*args, stdin=ORDER, timeout=30)  # SQLite would block opening it
        assert_one_line_error(result, "not a regular file")
    assert _listing(tmp_path) == ["pipe.db"]


def test_another_programs_file_is_refused_unchanged(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("not a database\n")
    result = run_cli("accept", "--source", str(other), stdin=ORDER, timeout=30)
    assert_one_line_error(result, "not a database")
    assert _listing(tmp_path) == ["notes.txt"]
    assert other.read_text() == "not a database\n"


def test_bad_input_creates_no_database(tmp_path: Path) -> None:
    new = tmp_path / "new.db"
    for command, stdin in (("accept", '{"id": "o-1", "sku": "pen", "qty": 0}'), ("publish", "[")):
        result = run_cli(command, "--source", str(new), stdin=stdin, timeout=30)
        assert_one_line_error(result)
    assert _listing(tmp_path) == []


def test_the_library_refuses_a_device_too(tmp_path: Path) -> None:
    link = tmp_path / "null.db"
    link.symlink_to("/dev/null")
    with pytest.raises(ValueError, match="not a regular file"):
        Outbox(link)
    assert _listing(tmp_path) == ["null.db"]
