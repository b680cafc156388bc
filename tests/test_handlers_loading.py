"""``load_handlers("MODULE:ATTR")``: real modules written to a temporary directory on the import
path, each way of naming them wrong refused with a message that says which, and the CLI's
form of that refusal (one line, exit 2)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from ackledger.cli import Parser
from ackledger.cli.arguments import handlers_arg
from ackledger.sink.handler_tx import HandlerTransaction
from ackledger.sink.handlers import HandlerSpecError, load_handlers
from ackledger.store.sqlite.tx import SqliteTx

Write = Callable[[str, str], None]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Write]:
    """``write(dotted_name, source)``: a module file (packages made as needed) importable
    from ``tmp_path``; forgotten by ``sys.modules`` after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(dotted: str, source: str) -> None:
        parts = dotted.split(".")
        folder = tmp_path
        for package in parts[:-1]:
            folder = folder / package
            folder.mkdir(exist_ok=True)
            (folder / "__init__.py").touch()
        (folder / f"{parts[-1]}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(parts[0])

    yield write
    for name in list(sys.modules):
        if name.partition(".")[0] in written:
            del sys.modules[name]


GOOD = """
    import functools

    def stock_added(tx, event):
        tx.execute("INSERT INTO seen (type, id) VALUES (?, ?)", (event["type"], event["id"]))

    class Shipped:
        def __call__(self, tx, event, *, note="shipped"):
            tx.execute("INSERT INTO seen (type, id) VALUES (?, ?)", (note, event["id"]))

    def _tagged(tag, tx, event):
        tx.execute("INSERT INTO seen (type, id) VALUES (?, ?)", (tag, event["id"]))

    class ns:
        HANDLERS = {
            "com.example.stock.added": stock_added,
            "com.example.order.shipped": Shipped(),
            "warehouse.stock.added": functools.partial(_tagged, "tagged"),
        }
"""


def test_a_good_spec_gives_a_new_dict_of_the_modules_handlers(write_module: Write) -> None:
    write_module("shop.events.handlers", GOOD)
    handlers = load_handlers("shop.events.handlers:ns.HANDLERS")
    module = sys.modules["shop.events.handlers"]
    declared = module.ns.HANDLERS
    assert handlers == declared
    assert all(handlers[name] is declared[name] for name in declared)
    handlers.clear()  # the caller's own copy: the module's dict stays as it was
    assert len(declared) == 3

    handlers = load_handlers("shop.events.handlers:ns.HANDLERS")
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE seen (type TEXT, id TEXT)")
    tx = HandlerTransaction(SqliteTx(conn))  # what the inbox hands a handler
    for name, handler in handlers.items():
        handler(tx, {"type": name, "id": f"e-{len(name)}"})
    assert sorted(conn.execute("SELECT type, id FROM seen")) == [
        ("com.example.stock.added", "e-23"),
        ("shipped", "e-25"),
        ("tagged", "e-21"),
    ]


def test_any_mapping_is_taken_and_its_keys_become_plain_strings(write_module: Write) -> None:
    write_module(
        "proxied",
        """
        from types import MappingProxyType

        class Name(str):
            pass

        def apply(tx, event):
            pass

        HANDLERS = MappingProxyType({Name("a.b"): apply})
        EMPTY = {}
        """,
    )
    handlers = load_handlers("proxied:HANDLERS")
    assert type(handlers) is dict and list(handlers) == ["a.b"]
    assert all(type(name) is str for name in handlers)
    assert load_handlers("proxied:EMPTY") == {}  # only the reference handler, then
    assert isinstance(sys.modules["proxied"].HANDLERS, MappingProxyType)


def refusal(spec: str) -> str:
    with pytest.raises(HandlerSpecError) as caught:
        load_handlers(spec)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert "\n" not in message
    assert repr(spec) in message  # which --handlers was wrong
    return message


@pytest.mark.parametrize("spec", ["shop.HANDLERS", "shop", ""])
def test_a_spec_without_a_colon(spec: str) -> None:
    message = refusal(spec)
    assert "no ':'" in message and "MODULE:ATTR" in message


@pytest.mark.parametrize("spec", [":HANDLERS", "shop:", "shop:H:x", "my shop:H", ".rel:H", "a:b."])
def test_a_spec_of_another_form(spec: str) -> None:
    assert "must be MODULE:ATTR" in refusal(spec)


def test_a_module_that_is_not_there_is_named(write_module: Write) -> None:
    write_module("present.inner", "HANDLERS = {}\n")
    assert "no module named 'nowhere_to_be_found'" in refusal("nowhere_to_be_found:HANDLERS")
    # A missing package on the way is named, with what was looked for.
    message = refusal("absentpkg.events:HANDLERS")
    assert "no module named 'absentpkg' (looking for 'absentpkg.events')" in message
    assert "no module named 'present.missing'" in refusal("present.missing:HANDLERS")


def test_an_import_that_raised_says_so_in_one_line(write_module: Write) -> None:
    write_module(
        "needs_config",
        """
        raise RuntimeError("DATABASE_URL is not set\\n(see the deployment guide)")
        """,
    )
    message = refusal("needs_config:HANDLERS")
    assert "importing 'needs_config' raised RuntimeError: DATABASE_URL is not set" in message
    assert "deployment guide" not in message


def test_a_found_module_that_lacks_a_dependency_is_not_called_missing(
    write_module: Write,
) -> None:
    write_module("uses_dep", "import dependency_not_installed_xyz\nHANDLERS = {}\n")
    message = refusal("uses_dep:HANDLERS")
    assert "importing 'uses_dep' raised ModuleNotFoundError" in message
    assert "dependency_not_installed_xyz" in message
    assert "no module named 'uses_dep'" not in message


def test_a_module_with_a_syntax_error(write_module: Write) -> None:
    write_module("broken", "HANDLERS = {\n")
    assert "importing 'broken' raised SyntaxError" in refusal("broken:HANDLERS")


def test_a_missing_attribute_names_how_far_it_got(write_module: Write) -> None:
    write_module("partial_ns", "class ns:\n    OTHER = {}\n")
    assert "module 'partial_ns' has no attribute 'HANDLERS'" in refusal("partial_ns:HANDLERS")
    assert "has no attribute 'ns.HANDLERS'" in refusal("partial_ns:ns.HANDLERS")
    assert "has no attribute 'nope'" in refusal("partial_ns:nope.HANDLERS")


def test_an_attribute_that_is_not_a_mapping(write_module: Write) -> None:
    write_module(
        "not_a_dict",
        """
        def apply(tx, event):
            pass

        PAIRS = [("a.b", apply)]
        """,
    )
    message = refusal("not_a_dict:PAIRS")
    assert "must be a dict of event type to handler, got list" in message
    assert "got function" in refusal("not_a_dict:apply")


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("5", "key 5: must be a string, got int"),
        ("'tab\\there'", "key 'tab\\there': must hold printable characters only"),
        ("''", "key '': must be 1-256 characters"),
        ("'x' * 257", "must be 1-256 characters"),
        ("None", "key None: must be a string, got NoneType"),
    ],
)
def test_a_key_that_is_not_an_event_type(write_module: Write, key: str, said: str) -> None:
    write_module(
        "bad_key",
        f"""
        def apply(tx, event):
            pass

        HANDLERS = {{"good.type": apply, {key}: apply}}
        """,
    )
    assert said in refusal("bad_key:HANDLERS")


def test_a_handler_that_cannot_be_called_as_handler_tx_event(write_module: Write) -> None:
    write_module(
        "bad_values",
        """
        def one_argument(tx):
            pass

        def three_arguments(tx, event, more):
            pass

        NUMBER = {"a.b": 3}
        STRING = {"a.b": "module.function"}
        ONE = {"a.b": one_argument}
        THREE = {"a.b": three_arguments}
        """,
    )
    assert "the handler of 'a.b' is not callable (got int)" in refusal("bad_values:NUMBER")
    assert "not callable (got str)" in refusal("bad_values:STRING")
    assert "the handler of 'a.b' must take (tx, event)" in refusal("bad_values:ONE")
    assert "must take (tx, event)" in refusal("bad_values:THREE")


def test_the_cli_form_is_one_line_and_exit_2(
    write_module: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    write_module("cli_handlers", GOOD)
    parser = Parser(prog="ackledger serve sink")
    parser.add_argument("--handlers", type=handlers_arg)
    loaded: dict[str, Any] = parser.parse_args(["--handlers", "cli_handlers:ns.HANDLERS"]).handlers
    assert sorted(loaded) == sorted(sys.modules["cli_handlers"].ns.HANDLERS)

    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--handlers", "cli_handlers:ns.MISSING"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("ackledger: error: ackledger serve sink: argument --handlers: ")
    assert "module 'cli_handlers' has no attribute 'ns.MISSING'" in err


def test_the_cli_finds_a_module_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "here_handlers.py").write_text(
        "def apply(tx, event):\n    pass\n\nHANDLERS = {'a.b': apply}\n", encoding="utf-8"
    )
    # -I: neither the current directory nor PYTHONPATH is on the path, as for the script.
    program = (
        "import sys\n"
        "from ackledger.cli.arguments import handlers_arg\n"
        "print(sorted(handlers_arg('here_handlers:HANDLERS')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", program],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['a.b']\n"


def test_a_spec_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(HandlerSpecError, match="got int"):
        load_handlers(3)  # type: ignore[arg-type]
