"""docs/integrations/fastapi.md as a project: its files are written from the page's Python
blocks (each names its file on its first line) and its shell commands run as written, on free
ports instead of the page's 8001 to 8003, PostgreSQL databases of the test's own instead of
the page's ``orders`` and ``shipping``, and an exchange and a queue of its own on the shared
RabbitMQ: a line ending in ``&`` is a process kept running (uvicorn apps, relays, a
consumer), an ``export`` line sets the environment of the lines after it, any other runs to
its end and must exit 0. The databases are then read back on connections of the test's own."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg
from tests.conftest import raw_rows
from tests.opshelp import free_port, wait_until

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parent.parent / "docs" / "integrations" / "fastapi.md"
PAGE_PORTS = ("8001", "8002", "8003")
PAGE_DATABASE = "postgresql://postgres@127.0.0.1:5432/"
PAGE_BROKER_NAMES = ("orders-events", "shipping-orders")


def _blocks(language: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def databases() -> Iterator[dict[str, str]]:
    """The page's two PostgreSQL databases: the test's own, dropped at the end."""
    pg.require_postgres()
    made = {name: pg.create_database() for name in ("orders", "shipping")}
    try:
        yield {name: pg.url_for(made_name) for name, made_name in made.items()}
    finally:
        for made_name in made.values():
            pg.drop_database(made_name)


@pytest.fixture
def broker_names() -> Iterator[dict[str, str]]:
    """The page's exchange and queue under names of the test's own, deleted at the end."""
    import pika

    from tests.rabbit import BROKER

    tag = uuid.uuid4().hex[:12]
    names = {page: f"{page}-{tag}" for page in PAGE_BROKER_NAMES}
    yield names
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    try:
        channel = connection.channel()
        channel.queue_delete(names["shipping-orders"])
        channel.exchange_delete(names["orders-events"])
    finally:
        connection.close()


def test_every_block_of_the_page_runs_as_a_project(
    tmp_path: Path, databases: dict[str, str], broker_names: dict[str, str]
) -> None:
    ports = {page: str(free_port()) for page in PAGE_PORTS}

    def local(text: str) -> str:
        for page, port in ports.items():
            text = text.replace(f":{page}", f":{port}").replace(f"--port {page}", f"--port {port}")
        for name, url in databases.items():
            text = text.replace(PAGE_DATABASE + name, url)
        for page, own in broker_names.items():
            text = text.replace(page, own)
        return text

    for block in _blocks("python"):
        name = block.splitlines()[0].removeprefix("# ").strip()
        assert name.endswith(".py"), f"a block of the page names no file: {block[:60]!r}"
        (tmp_path / name).write_text(local(block), encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for block in _blocks("sh"):
            for line in block.splitlines():
                if not line.strip() or line.startswith(("#", "pip install")):
                    continue
                command = local(line)
                if command.startswith("export "):
                    for item in shlex.split(command)[1:]:
                        name, _, value = item.partition("=")
                        env[name] = value
                    continue
                if command.endswith("&"):
                    running.append(_start(command.removesuffix("&").strip(), tmp_path, env))
                    continue
                done = subprocess.run(
                    ["bash", "-c", command], check=False, cwd=tmp_path, env=env,
                    capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                logs = "".join(_log(tmp_path, i) for i in range(len(running)))
                assert done.returncode == 0, f"{line}:\n{done.stdout}\n{done.stderr}\n{logs}"
        trace = subprocess.run(
            ["ackledger", "trace", "o-2", "--source", "orders.db", "--sink",
             f"http://127.0.0.1:{ports['8002']}/shipping/events", "--token-file", "token"],
            check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert trace.returncode == 0, trace.stderr
    finally:
        for _, process in running:
            process.terminate()
        for _, process in running:
            process.wait(timeout=30)
    for number, (line, process) in enumerate(running):
        log = _log(tmp_path, number)
        assert process.returncode in (0, -15), f"{line}:\n{log}"
        assert "Traceback" not in log, f"{line}:\n{log}"

    # Each order and its event committed together; each event applied once at shipping.
    assert raw_rows(tmp_path / "orders.db", "SELECT id FROM shop_orders ORDER BY id") == [
        ("o-1",), ("o-2",), ("o-3",),
    ]  # fmt: skip
    events = "SELECT id, sent FROM ackledger_outbox ORDER BY seq"
    assert raw_rows(tmp_path / "orders.db", events) == [("o-1", 1), ("o-2", 1), ("o-3", 1)]
    receipts = "SELECT id, receipts FROM ackledger_inbox ORDER BY id"
    assert raw_rows(tmp_path / "shipping.db", receipts) == [("o-1", 1), ("o-2", 1), ("o-3", 1)]
    assert raw_rows(tmp_path / "billing.db", "SELECT order_id, total FROM invoices") == [
        ("o-1", 30)
    ]
    # Over RabbitMQ: the same, on PostgreSQL, each Shipment written by the ORM handler once.
    orders, shipping = databases["orders"], databases["shipping"]
    assert pg.rows(orders, "SELECT id FROM shop_orders ORDER BY id") == [
        ("o-1",), ("o-2",), ("o-3",),
    ]  # fmt: skip
    assert pg.rows(orders, events) == [("o-1", True), ("o-2", True), ("o-3", True)]
    assert pg.rows(shipping, receipts) == [("o-1", 1), ("o-2", 1), ("o-3", 1)]
    assert pg.rows(shipping, "SELECT order_id, total FROM shipments ORDER BY order_id") == [
        ("o-1", 30), ("o-2", 12), ("o-3", 7),
    ]  # fmt: skip


def _start(command: str, cwd: Path, env: dict[str, str]) -> tuple[str, subprocess.Popen[bytes]]:
    """``command`` kept running, its output in a log of its own; a server is waited for."""
    number = len(list(cwd.glob("process-*.log")))
    with (cwd / f"process-{number}.log").open("wb") as log:
        # Through the shell, as the page's reader runs it: "$ORDERS_DB" is expanded.
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    found = re.search(r"--port (\d+)", command)
    if found is not None:
        port = int(found.group(1))
        wait_until(lambda: process.poll() is not None or _listening(port), command)
        assert process.poll() is None, _log(cwd, number)
    return command, process


def _log(cwd: Path, number: int) -> str:
    return (cwd / f"process-{number}.log").read_text(errors="replace")
