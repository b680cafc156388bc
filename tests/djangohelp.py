"""The test Django project (tests/django_project) on a real database: its ``manage.py`` run
as a real process, its database read back from a separate connection."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ackledger.ops.processes import Service, start_listener

from . import pg

PROJECT = Path(__file__).parent / "django_project"
MANAGE = PROJECT / "manage.py"
SRC = Path(__file__).parents[1] / "src"


@dataclass
class Project:
    """One copy of the test project's database: ``SHOP_DB`` is a SQLite file or a URL."""

    db: str

    @property
    def is_postgres(self) -> bool:
        return self.db.startswith("postgresql://")

    @property
    def env(self) -> dict[str, str]:
        return self.env_with()

    def env_with(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "SHOP_DB": self.db,
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(SRC)]),
            "DJANGO_SETTINGS_MODULE": "site_config.settings",
            **(extra or {}),
        }

    def manage_command(self, *args: str) -> list[str]:
        return [sys.executable, str(MANAGE), *args]

    def manage(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.manage_command(*args),
            check=False,
            env=self.env_with(env),
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    def start(
        self, *args: str, output: bool = True, log: Path | None = None
    ) -> subprocess.Popen[str]:
        """``manage.py ARGS`` as a running process; its output (stdout and stderr together)
        readable unless ``output`` is False, or appended to ``log``."""
        if log is not None:
            with log.open("ab") as out:
                return subprocess.Popen(
                    self.manage_command(*args), env=self.env, cwd=PROJECT,
                    stdout=out, stderr=subprocess.STDOUT, text=True,
                )  # fmt: skip
        return subprocess.Popen(
            self.manage_command(*args),
            env=self.env,
            cwd=PROJECT,
            stdout=subprocess.PIPE if output else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if output else subprocess.DEVNULL,
            text=True,
        )

    def serve_sink(self, port: int, log: Path, env: dict[str, str] | None = None) -> Service:
        """``manage.py ackledger serve sink`` on loopback ``port``, once it says it listens;
        its stderr appended to ``log``."""
        command = self.manage_command("ackledger", "serve", "sink", "--port", str(port))
        return start_listener(command, env=self.env_with(env), stderr_path=log, timeout=60)

    def place_orders(self, count: int) -> None:
        """Orders ``0`` .. ``count - 1`` placed through the shop's view, each in its own
        request: the order row and its event committed together."""
        self.shell(
            "import json\n"
            "from django.test import Client\n"
            "client = Client()\n"
            f"for number in range({count}):\n"
            "    body = json.dumps({'number': str(number), 'sku': 'tea', 'qty': 1})\n"
            "    assert client.post('/orders', body, content_type='application/json')"
            ".status_code == 201\n"
        )

    def runserver(self, port: int, *options: str) -> subprocess.Popen[str]:
        """``manage.py runserver`` on loopback ``port``, once it accepts connections."""
        server = self.start("runserver", "--noreload", *options, f"127.0.0.1:{port}", output=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return server
            except OSError:
                time.sleep(0.05)
        server.kill()
        server.wait()
        raise RuntimeError("manage.py runserver did not start")

    def shell(self, code: str, env: dict[str, str] | None = None) -> str:
        """Run ``code`` in ``manage.py shell``; its stdout."""
        return self.manage("shell", "--no-imports", "-c", code, env=env).stdout

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if self.is_postgres:
            return pg.rows(self.db, sql, params)
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()


#: The kinds of database each test runs on, for ``pytest.fixture(params=KINDS)``.
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def project_on(kind: str, tmp_path: Path) -> Iterator[Project]:
    """A project whose database is a new SQLite file or a new PostgreSQL database."""
    if kind == "sqlite":
        yield Project(str(tmp_path / "shop.db"))
        return
    pg.require_postgres()
    name = pg.create_database()
    try:
        yield Project(pg.url_for(name))
    finally:
        pg.drop_database(name)


def pair_on(kind: str, tmp_path: Path) -> Iterator[tuple[Project, Project]]:
    """Two projects on databases of their own: the shop (A) and the warehouse (B)."""
    shop_dir, warehouse_dir = tmp_path / "shop", tmp_path / "warehouse"
    shop_dir.mkdir()
    warehouse_dir.mkdir()
    for shop in project_on(kind, shop_dir):
        for warehouse in project_on(kind, warehouse_dir):
            yield shop, warehouse


def _shipped(tx: Any, event: dict[str, Any]) -> None:
    """A plain sink's handler for the shop's event: the receipt is the record."""


#: For ``ackledger serve sink --handlers tests.djangohelp:SINK_HANDLERS``.
SINK_HANDLERS = {"com.example.order.placed": _shipped}
