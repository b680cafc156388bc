"""The README's examples run as written, and its commands and install lines are real."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ackledger.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_opens_with_the_two_commands() -> None:
    first = blocks("sh")[0]
    assert first.splitlines()[0].startswith("make demo")
    assert first.splitlines()[1].startswith("make test")


def test_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    examples = blocks("python")
    assert len(examples) >= 2  # the outbox/inbox example and the ledger's: none is skipped
    for code in examples:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})  # noqa: S102


@pytest.mark.slow
def test_the_quick_start_runs(tmp_path: Path) -> None:
    """Publish, relay, sink: the event is applied once and nothing stays pending."""
    script = next(b for b in blocks("sh") if "ackledger serve sink" in b)
    probe = socket.create_server(("127.0.0.1", 0))
    port = str(probe.getsockname()[1])
    probe.close()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-e", "-c", script.replace("8765", port)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "sent 1 event(s)" in result.stderr  # the relay's log line, on the first ACK
    out = [line for line in result.stdout.strip().splitlines() if "listening on" not in line]
    # publish printed seq 1 twice (the same event is not a second row), the sink holds 7
    assert out[:2] == ["1", "1"] and "7" in out, out
    assert out[-1] == "[]"


def _table_commands() -> list[str]:
    """Every ``ackledger ...`` code span in the README's command table."""
    text = README.read_text()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    spans: list[str] = []
    for row in re.findall(r"^\| (.+?) \| .+ \|$", table, flags=re.M):
        spans += re.findall(r"`([^`]+)`", row)
    return spans


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command line's parser, by its words: "relay", "serve sink", ..."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if words:
            found[words] = parser
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, f"{words} {name}".strip())

    walk(build_parser(), "")
    return found


def test_the_command_table_names_every_command_with_real_options() -> None:
    parsers = _parsers()
    named: set[str] = set()
    current = ""
    for span in _table_commands():
        words = span.removeprefix("ackledger ").split()
        # "requeue", "quarantined" after "ackledger quarantine": more commands of one row.
        command = " ".join(w for w in words[:2] if not w.startswith(("-", "[")) and w.isalpha())
        if command not in parsers:
            command = words[0]
        assert command in parsers, f"README names a command that does not exist: {span!r}"
        current = command
        named.add(current)
        options = {o for a in parsers[current]._actions for o in a.option_strings}
        for flag in re.findall(r"--[a-z][a-z-]*", span):
            assert flag in options, f"`ackledger {current}` has no {flag} ({span!r})"
    top = {words for words in parsers if " " not in words}
    leaves = {w for w, p in parsers.items() if not p._subparsers}
    missing = {w for w in leaves if w not in named and w.split()[0] not in named}
    assert not missing and top <= {w.split()[0] for w in named}, missing


def test_the_install_table_covers_every_user_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    text = README.read_text()
    assert "pip install './ackledger'" in text
    for extra in set(extras) - {"dev", "bench", "demo"}:
        assert f"pip install './ackledger[{extra}]'" in text, extra
    flat = " ".join(text.split())
    assert "It is not exactly-once delivery" in flat and "at-least-once delivery" in flat
    assert len(text.splitlines()) < 200


def test_the_readme_links_only_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_broker_example_runs(tmp_path: Path) -> None:
    """The "Relay to a broker" commands, as written, against the RabbitMQ on loopback."""
    script = next(b for b in blocks("sh") if "ackledger consume" in b)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "7"
    # The queue is drained: the consumer acknowledged what it applied.
    import pika

    connection = pika.BlockingConnection(
        pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F")
    )
    try:
        channel = connection.channel()
        assert (
            channel.queue_declare("shipping", durable=True, passive=True).method.message_count == 0
        )
        channel.queue_delete("shipping")
        channel.exchange_delete("shop")
    finally:
        connection.close()
