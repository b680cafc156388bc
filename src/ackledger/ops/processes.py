"""Starting ackledger's own commands as real child processes (`ackledger verify`, the demo, tests,
benchmarks)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._core.closing import Closing

_LISTENING = re.compile(r"listening on (http://\S+)")


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ackledger.cli", *args]


def run_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``ackledger ARGS`` in a new process and wait for it."""
    return subprocess.run(
        cli_command(*args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@dataclass
class Service(Closing):
    """A running ``ackledger serve ...`` process and the base URL it printed."""

    process: subprocess.Popen[str]
    base_url: str
    log: Path | None = None

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def close(self) -> None:
        self.stop()


def start_service(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stderr_path: Path | None = None,
    timeout: float = 20,
) -> Service:
    """Start ``ackledger ARGS`` (a ``serve`` command with ``--port 0``) and wait for its URL."""
    return start_listener(cli_command(*args), env=env, stderr_path=stderr_path, timeout=timeout)


def start_listener(
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stderr_path: Path | None = None,
    timeout: float = 20,
) -> Service:
    """Start any command that prints "listening on URL" and wait for that line."""
    args = list(command)
    stderr = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if stderr_path and not isinstance(stderr, int):
        stderr.close()
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        found = _LISTENING.search(line)
        if found:
            return Service(process, found.group(1), stderr_path)
    process.kill()
    process.wait()
    raise RuntimeError(f"service {' '.join(args)} did not start (exit {process.returncode})")


class Child:
    """One ``ackledger`` process whose output goes to a log file (campaigns, ``verify``)."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                cli_command(*args), stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no handler, no finally, no close
        self.process.wait()

    def said(self, text: str) -> bool:
        return text in self.log.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, text: str, timeout: float = 30) -> bool:
        """Until its log says ``text`` (a consumer's "consuming": its signal handler is in)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.process.poll() is None:
            if self.said(text):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a stopped process is continued first, or it could not act on it), then
        SIGKILL if it has not ended in ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -signal.SIGKILL
