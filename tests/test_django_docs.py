"""docs/integrations/django.md as a project: its files are written from the page's blocks
(each names its path on its first line), its shell session and its commands run against a
fresh PostgreSQL database, and the database is read back from a separate connection."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from . import pg

PAGE = Path(__file__).resolve().parent.parent / "docs" / "integrations" / "django.md"
SRC = Path(__file__).resolve().parent.parent / "src"
SHELL = "# python manage.py shell"
MANAGE_PY = """import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _blocks(language: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], str]]:
    pg.require_postgres()
    name = pg.create_database()
    for block in _blocks("python"):
        first = block.splitlines()[0]
        if first == SHELL:
            continue
        path = tmp_path / first.removeprefix("# ").strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block, encoding="utf-8")
    for package in ("shop_site", "orders", "orders/migrations"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    (tmp_path / "manage.py").write_text(MANAGE_PY, encoding="utf-8")
    env = {**os.environ, "SHOP_DB_NAME": name, "PYTHONPATH": str(SRC)}
    try:
        yield tmp_path, env, pg.url_for(name)
    finally:
        pg.drop_database(name)


def _manage(site: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        check=False,
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_page_runs_as_a_project(site: tuple[Path, dict[str, str], str]) -> None:
    folder, env, url = site
    _manage(folder, env, "makemigrations", "orders")
    for command in _blocks("sh"):
        for line in command.splitlines():
            if line.startswith("python manage.py migrate"):
                _manage(folder, env, *shlex.split(line)[2:])
    (session,) = [block for block in _blocks("python") if block.startswith(SHELL)]
    _manage(folder, env, "shell", "--no-imports", "-c", session)
    # The view that fails after publishing leaves neither its order nor its event.
    _manage(
        folder, env, "shell", "--no-imports", "-c",
        "import json\n"
        "from django.test import Client\n"
        "answer = Client(raise_request_exception=False).post('/orders', json.dumps("
        "{'number': '1002', 'sku': 'tea', 'qty': 500}), content_type='application/json')\n"
        "assert answer.status_code == 500, answer.status_code\n",
    )  # fmt: skip
    assert pg.rows(url, "SELECT number FROM orders_order") == [("1001",)]
    assert pg.rows(url, "SELECT id, sent FROM ackledger_outbox") == [("order-1001", 0)]
    assert pg.rows(url, "SELECT order_number FROM orders_shipment") == [("1001",)]

    # The commands, as the page gives them; those that need another service only parse.
    lines = [line for block in _blocks("sh") for line in block.splitlines()]
    for line in lines:
        if not line.startswith("python manage.py ackledger"):
            continue
        words = shlex.split(line)[2:]
        if words[1] in ("relay", "reconcile", "serve", "consume"):  # long-running, or a broker
            words.append("--help")
        _manage(folder, env, *words)
    kinds = pg.rows(url, "SELECT kind FROM ackledger_outbox_log ORDER BY seq")
    assert kinds == [("quarantined",), ("requeued",)]

    (deployment,) = [yaml.safe_load(block) for block in _blocks("yaml")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:4] == ["python", "manage.py", "ackledger", "relay"]
    _manage(folder, env, *command[2:], "--help")
