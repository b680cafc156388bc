"""The command line as a new user meets it: --version, no abbreviated options, exit statuses
that each mean one thing, a ``pending`` that says what it leaves out, JSON-lines input for
``accept`` and ``publish``, a ledger named by its base URL, ``--allow-host`` on the reading
commands, and ``trace`` of an unknown id.

Most run ``cli.main`` in this process (the same code the script runs, faster than a process
each); those about what a process prints or exits with run the real ``ackledger`` script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ackledger
from ackledger import Outbox
from ackledger.cli import build_parser, main
from ackledger.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_REFUSED,
    EXIT_STOPPED,
    EXIT_UNREACHABLE,
)
from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows
from tests.opshelp import free_port
from tests.test_cli import assert_one_line_error


def _order(name: str, qty: int = 1) -> str:
    return json.dumps({"id": name, "sku": "pen", "qty": qty})


def _exit_of(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0)


# --- --version, abbreviations, --help -----------------------------------------------------


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_of(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ackledger {ackledger.__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ["pending", "--source", "DB", "--js"],  # was taken as --json
        ["pending", "--source", "DB", "--lim", "3"],
        ["status", "--source", "DB", "--js"],
        ["quarantined", "--source", "DB", "--js"],
    ],
)
def test_abbreviated_options_are_refused(
    argv: list[str], source_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Outbox(source_db).close()  # a real outbox: only the abbreviation is wrong
    argv = [str(source_db) if arg == "DB" else arg for arg in argv]
    assert _exit_of(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("ackledger: error:") and err.count("\n") == 1
    assert "unrecognized arguments" in err


def test_every_parser_refuses_abbreviations() -> None:
    seen = 0
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        assert parser.allow_abbrev is False, parser.prog
        seen += 1
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                parsers.extend(choices.values())
    assert seen > 15


def test_help_lists_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_of(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit status:" in out
    for code, words in (
        (EXIT_STOPPED, "answer is no"),
        (EXIT_BAD_INPUT, "bad input"),
        (EXIT_REFUSED, "poison"),
        (EXIT_UNREACHABLE, "could not be reached"),
    ):
        line = next(line for line in out.splitlines() if line.strip().startswith(f"{code} "))
        assert words in line
    assert len({EXIT_STOPPED, EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNREACHABLE}) == 4


# --- pending says what it leaves out --------------------------------------------------------


def test_pending_says_how_many_more_there_are(
    source_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Outbox(source_db) as outbox:
        for number in range(20):
            outbox.accept({"id": f"o-{number}", "sku": "pen", "qty": 1})
    assert main(["pending", "--source", str(source_db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        len(out) == 1 + 16 + 1
        and out[-1] == "16 of 20 pending shown; --limit N (up to 1000) for more"
    )
    assert main(["pending", "--source", str(source_db), "--limit", "20"]) == 0
    assert "shown" not in capsys.readouterr().out  # all shown: nothing to say
    assert main(["pending", "--source", str(source_db), "--json", "--limit", "3"]) == 0
    shown = capsys.readouterr()
    assert [item["id"] for item in json.loads(shown.out)] == ["o-0", "o-1", "o-2"]
    assert shown.err.strip() == "3 of 20 pending shown; --limit N (up to 1000) for more"


# --- JSON lines ------------------------------------------------------------------------------


def test_accept_jsonl_writes_each_line_in_one_process(
    source_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "orders.jsonl"
    lines.write_text("\n".join(_order(f"o-{n}", n + 1) for n in range(50)) + "\n\n")
    assert main(["accept", "--source", str(source_db), "--jsonl", str(lines)]) == 0
    shown = capsys.readouterr()
    assert shown.out.split() == [str(seq) for seq in range(1, 51)]
    assert shown.err.strip() == "wrote 50 event(s)"
    assert raw_rows(source_db, "SELECT COUNT(*), SUM(qty) FROM orders") == [(50, 1275)]


def test_a_bad_line_names_its_number_and_keeps_the_lines_before_it(
    source_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "orders.jsonl"
    lines.write_text(f"{_order('o-1')}\n\n{_order('o-2')}\n{_order('o-3', 0)}\n{_order('o-4')}\n")
    assert _exit_of(["accept", "--source", str(source_db), "--jsonl", str(lines)]) == 2
    shown = capsys.readouterr()
    assert shown.out.split() == ["1", "2"]
    assert shown.err.count("\n") == 1
    assert shown.err.startswith("ackledger: error: line 4: qty:")
    assert "the 2 event(s) before it were written" in shown.err
    assert raw_rows(source_db, "SELECT id FROM orders ORDER BY id") == [("o-1",), ("o-2",)]


def test_a_bad_first_line_creates_no_database(
    source_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "events.jsonl"
    lines.write_text('{"id": "e-1", "type": "t.x"\n')
    assert _exit_of(["publish", "--source", str(source_db), "--jsonl", str(lines)]) == 2
    assert "line 1: not valid JSON" in capsys.readouterr().err
    assert not source_db.exists()
    missing = tmp_path / "nope.jsonl"
    assert _exit_of(["publish", "--source", str(source_db), "--jsonl", str(missing)]) == 2
    assert "--jsonl: cannot read" in capsys.readouterr().err


@pytest.mark.slow
def test_publish_jsonl_from_stdin(source_db: Path) -> None:
    events = "".join(
        json.dumps({"id": f"e-{n}", "type": "t.x", "data": n}) + "\n" for n in range(5)
    )
    done = run_cli("publish", "--source", str(source_db), "--jsonl", "-", stdin=events)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "2", "3", "4", "5"]
    with Outbox(source_db) as outbox:
        assert [item["data"] for item in outbox.pending()] == [0, 1, 2, 3, 4]


# --- trace, unreachable databases -------------------------------------------------------------


def test_trace_of_an_id_known_nowhere_exits_1_with_a_line(
    source_db: Path, sink_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Outbox(source_db).close()
    ackledger.Inbox(sink_db).close()
    code = main(["trace", "nosuch", "--source", str(source_db), "--sink", str(sink_db)])
    assert code == EXIT_STOPPED
    assert capsys.readouterr().err.strip() == (
        "ackledger: trace: 'nosuch' is known nowhere: no order, no outbox row and no receipt "
        "at the sink"
    )


@pytest.mark.slow
def test_an_unreachable_database_is_exit_4_not_bad_input() -> None:
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    done = run_cli("status", "--source", dead)
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    assert done.stderr.startswith("ackledger: error: database unavailable:")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# --- the ledger by its base URL, --allow-host ----------------------------------------------------


@pytest.mark.slow
def test_deliver_and_status_take_the_ledgers_base_or_deliveries_url(
    ledger_service: Service, source_db: Path
) -> None:
    key = ["--case-id", "c", "--work-id", "w", "--pod-uid", "p"]
    numbers = []
    for url in (ledger_service.base_url, ledger_service.base_url + "/deliveries"):
        done = run_cli("deliver", "--ledger", url, *key)
        assert done.returncode == 0, done.stderr
        numbers.append(json.loads(done.stdout)["delivery_no"])
    assert numbers[0] == numbers[1]
    Outbox(source_db).close()
    for url in (ledger_service.base_url, ledger_service.base_url + "/deliveries"):
        done = run_cli("status", "--source", str(source_db), "--ledger", url, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["ledger"]["url"] == ledger_service.base_url


@pytest.mark.parametrize("command", ["status", "trace"])
def test_status_and_trace_refuse_a_host_unless_allowed(
    source_db: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Outbox(source_db).close()
    url = "http://sink.invalid:8080"
    argv = ["--source", str(source_db), "--sink", url]
    argv = ["status", *argv] if command == "status" else ["trace", "o-1", *argv]
    assert _exit_of(argv) == EXIT_BAD_INPUT
    assert "sink.invalid" in capsys.readouterr().err
    # Allowed, it is asked (and, being .invalid, cannot be reached: exit 4, not a refusal).
    assert main([*argv, "--allow-host", "sink.invalid", "--timeout", "2"]) == EXIT_UNREACHABLE
    assert "could not be read" in capsys.readouterr().err


def test_bad_input_is_still_one_line_from_the_script(source_db: Path) -> None:
    assert_one_line_error(run_cli("pending", "--sourc", str(source_db)), "--source")
