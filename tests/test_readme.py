"""The README's examples run as written."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


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
def test_shell_example_runs(tmp_path: Path) -> None:
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
    assert "dispatched 2 event(s)" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


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
