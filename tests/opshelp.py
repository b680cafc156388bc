"""Helpers for the operating tests: free ports, waiting on real processes, reading metrics."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ackledger.ops.processes import Service, start_service
from tests.conftest import raw_rows


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``predicate`` (generously: the machine is shared) until it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def settled(read: Callable[[], set[str]]) -> set[str]:
    """``read()`` once two reads a quarter of a second apart agree (a request in flight when
    its client died may still be committing)."""
    last = read()
    while True:
        time.sleep(0.25)
        now = read()
        if now == last:
            return now
        last = now


def start_relay(source: Path, url: str, log: Path, *extra: str) -> Service:
    """An ``ackledger relay`` process with metrics on a free port (its "listening on" line)."""
    args = ["relay", "--source", str(source), "--to", url, "--metrics-port", "0"]
    args += ["--base-backoff", "0.05", "--max-backoff", "0.3", "--poll-interval", "0.05"]
    return start_service([*args, *extra], stderr_path=log)


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback test URL
        text = answer.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return found


def one(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def count(path: Path, where: str) -> int:
    value: Any = raw_rows(path, f"SELECT COUNT(*) FROM ackledger_outbox WHERE {where}")[0][0]
    return int(value)


def ids(path: Path, sql: str) -> list[str]:
    return [str(row[0]) for row in raw_rows(path, sql)]


def process_state(pid: int) -> str:
    # The third field of /proc/PID/stat: R running, S sleeping, T stopped, ...
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@contextmanager
def uvicorn_serving(
    folder: Path, module: str, env: dict[str, str], ready: Callable[[int], bool]
) -> Iterator[int]:
    """A user's app module (its ``app``) under ``uvicorn`` in a process of its own on a free
    loopback port, once ``ready(port)``; yields the port. Its log must end clean."""
    (folder / "user_app.py").write_text(module)
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "user_app:app", "--app-dir", str(folder)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    log_path = folder / "uvicorn.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    try:
        wait_until(lambda: process.poll() is not None or ready(port), "uvicorn to serve")
        assert process.poll() is None, log_path.read_text()
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
    # uvicorn ends a SIGTERM by re-raising it; a failure would have left a traceback.
    assert process.returncode in (0, -signal.SIGTERM), log_path.read_text()
    assert "Traceback" not in log_path.read_text()
