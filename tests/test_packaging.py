"""What a new user installs and reads: the version, the license, the changelog, the metadata,
``make demo``'s extra, a core-only install that names the extra a command needs, and the
documented ledger client run against a real ledger process."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

import ackledger
from ackledger.ops.processes import Service, run_cli

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_comes_from_the_installed_metadata() -> None:
    assert ackledger.__version__ == version("ackledger") == PYPROJECT["project"]["version"]


@pytest.mark.slow
def test_the_script_prints_it() -> None:
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"ackledger {ackledger.__version__}"


def test_license_is_the_mit_text_of_the_authors() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the ackledger authors\n")
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    assert "License :: OSI Approved :: MIT License" in PYPROJECT["project"]["classifiers"]


def test_changelog_is_a_users_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\S+)(?: - (\d{4}-\d{2}-\d{2}))?$", text, flags=re.M)
    assert headings[0] == ("Unreleased", "")
    released = [name for name, _ in headings[1:]]
    assert PYPROJECT["project"]["version"] in released
    assert all(day for _, day in headings[1:])  # every release has its date
    # Under each heading only bullet lines (and their continuations): simple to add to.
    for section in re.split(r"^## .*$", text, flags=re.M)[1:]:
        lines = [line for line in section.strip().splitlines() if line]
        assert lines and all(line.startswith(("- ", "  ")) for line in lines), lines[:3]
    # What changed for a user, not how the work went. Code (``--session``, ``Session``,
    # ``handler(session, event)``) names the user's objects: only the prose is read.
    prose = re.sub(r"`[^`]*`", "", text)
    assert not re.search(
        r"(?<!sqlalchemy )\bsession|\bitems? \d|issue \d|bench/CHANGES", prose, flags=re.I
    )


def test_the_demo_extra_holds_no_development_tools() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    # The demo ends by pointing at the console on its databases: its extra comes along.
    assert extras["demo"] == ["ackledger[console]"]
    assert extras["console"][0] == "ackledger[server]"
    for tool in ("mypy", "ruff", "hypothesis", "pytest", "playwright"):
        assert not any(tool in requirement for requirement in extras["server"])
        assert not any(tool in requirement for requirement in extras["console"])
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(DEMO_STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "'.[demo]'" in recipe and "dev" not in recipe
    assert re.search(r"^demo: \$\(DEMO_STAMP\)$", makefile, flags=re.M)


@pytest.fixture(scope="module")
def core_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with ackledger's sources and none of its extras (the
    sources on its path by a .pth file, as an editable install puts them; no pip, no
    network). Its interpreter's path is returned."""
    folder = tmp_path_factory.mktemp("core-only")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")],
        check=True,
        timeout=120,
    )
    python = folder / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "ackledger.pth").write_text(str(Path(ackledger.__file__).parents[1]) + "\n")
    return python


def _core_cli(
    python: Path, folder: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``ackledger ARGS`` run by the core-only interpreter in ``folder``."""
    return subprocess.run(
        [str(python), "-m", "ackledger.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["demo"], "server"),  # printed "VERDICT: FAIL ... did not start" before
        (["serve", "sink", "--db", "sink.db", "--port", "0"], "server"),
        (["console", "--source", "source.db", "--port", "0"], "console"),
        (["serve", "ledger", "--db", "ledger.db", "--port", "0"], "server"),
        (
            ["consume", "--from", "amqp://guest:guest@127.0.0.1:1/%2F?queue=q", "--db", "i.db"],
            "amqp",
        ),
        (["consume", "--from", "nats://127.0.0.1:1?stream=s&durable=d", "--db", "i.db"], "nats"),
        (["migrate", "--target", "postgresql://postgres@127.0.0.1:1/x"], "postgres"),
    ],
)
def test_a_core_only_install_names_the_missing_extra(
    core_only: Path, tmp_path: Path, args: list[str], extra: str
) -> None:
    done = _core_cli(core_only, tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"pip install 'ackledger[{extra}]'" in lines[0]
    assert list(tmp_path.iterdir()) == []  # refused before any database was created


@pytest.mark.slow
def test_the_core_only_install_still_runs_the_core(core_only: Path, tmp_path: Path) -> None:
    order = '{"id": "o-1", "sku": "pen", "qty": 1}'
    done = _core_cli(core_only, tmp_path, "accept", "--source", "o.db", stdin=order)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr


def test_the_ledger_client_is_exported() -> None:
    assert "LedgerClient" in ackledger.__all__
    from ackledger.ledger.client import LedgerClient

    assert ackledger.LedgerClient is LedgerClient


def test_the_ledger_client_refuses_before_any_request() -> None:
    with pytest.raises(ackledger.UnsafeTarget):
        ackledger.LedgerClient("http://ledger.invalid:8080")
    with pytest.raises(ackledger.UnsafeTarget):
        ackledger.LedgerClient("http://127.0.0.1:1/events")
    client = ackledger.LedgerClient("http://127.0.0.1:1", pod_uid="p")
    with pytest.raises(ackledger.InvalidEvent) as refused:
        client.request("bad key!", "w")
    assert refused.value.field == "case_id"


@pytest.mark.slow
def test_the_documented_ledger_client_example_runs(ledger_service: Service) -> None:
    docs = (ROOT / "docs" / "ledger.md").read_text()
    example = next(
        block
        for block in re.findall(r"```python\n(.*?)```", docs, flags=re.S)
        if "LedgerClient" in block
    )
    assert "http://127.0.0.1:8080" in example
    code = example.replace("http://127.0.0.1:8080", ledger_service.base_url)
    exec(compile(code, "docs/ledger.md", "exec"), {"__name__": "docs"})  # noqa: S102


#: What each extra promises: the modules a user of that extra imports.
PROMISES = {
    "server": ["starlette", "uvicorn", "prometheus_client", "ackledger.sink.app",
               "ackledger.ledger.app", "ackledger.web.server"],
    "postgres": ["psycopg", "psycopg_pool", "ackledger.store.postgres.backend"],
    "amqp": ["pika", "ackledger.wire.amqp", "ackledger.sink.consume_amqp"],
    "nats": ["nats", "ackledger.wire.nats", "ackledger.sink.consume_nats"],
    "console": ["jinja2", "ackledger.ops.console.app"],
}  # fmt: skip

#: Uses the core API end to end (outbox, dispatch, inbox with a handler, ledger, the sender
#: for a URL, the CLI's parser) and prints the optional packages that got imported.
CORE_USE = """
import json, os, sys, tempfile
import ackledger
from ackledger import Inbox, Ledger, Outbox, dispatch, new_event, sender
from ackledger.cli import build_parser
folder = tempfile.mkdtemp()
outbox = Outbox(os.path.join(folder, "o.db"), source="/t")
with outbox.transaction() as tx:
    tx.publish(new_event("t.made", {"n": 1}, source="/t", id="e-1"))
inbox = Inbox(os.path.join(folder, "i.db"), handlers={"t.made": lambda tx, event: None})
assert dispatch(outbox, lambda event: inbox.receive(event) == "applied") == ["e-1"]
assert Ledger(os.path.join(folder, "l.db")).request("c", "w", pod_uid="p")["delivery_no"]
sender("http://127.0.0.1:1/events")
build_parser().parse_args(["pending", "--source", "x.db"])
optional = {"starlette", "uvicorn", "psycopg", "psycopg_pool", "pika", "nats", "jinja2"}
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in optional)))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("ackledger-*.whl")
    return built


def _child(python: Path, code: str) -> str:
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_wheel_ships_the_consoles_templates(wheel: Path) -> None:
    """The console renders files that are not Python: each of them is in the wheel."""
    templates = ROOT / "src" / "ackledger" / "ops" / "console" / "templates"
    wanted = {f"ackledger/ops/console/templates/{page.name}" for page in templates.glob("*.html")}
    assert len(wanted) >= 8
    assert wanted <= set(zipfile.ZipFile(wheel).namelist())


@pytest.mark.slow
def test_the_wheel_installs_with_each_extra(wheel: Path, tmp_path: Path) -> None:
    """One fresh venv: the wheel alone, then each extra added in turn. The core runs with no
    optional package present, and once every extra is there, the core still imports none."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    _pip(python, str(wheel))
    assert _child(python, CORE_USE).strip() == "[]"
    done = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "ackledger"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == f"ackledger {PYPROJECT['project']['version']}", done.stderr
    for extra, modules in PROMISES.items():
        missing = _child(python, f"import importlib.util as u; print([m for m in {modules[:1]!r} "
                         "if u.find_spec(m) is None])")  # fmt: skip
        assert missing.strip() == str(modules[:1]), f"{extra} was there before its extra"
        _pip(python, f"{wheel}[{extra}]")
        _child(python, "".join(f"import {module}\n" for module in modules))
    assert _child(python, CORE_USE).strip() == "[]"
