"""The store as one typed interface, read from the source: every dialect implements each
operation of ``Tx`` and ``Backend`` and offers no other, its ``queries.py`` supplies what the
shared SQL is rendered with and holds no statement it never runs (the two dialects' statements
differ, so their names do too), and no module outside ``store/`` asks which database it is
talking to.

The checks find the dialects by their packages under ``store/`` (a package with ``tx.py``
and ``queries.py``), so a third dialect is held to the same rules without editing this file.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from ackledger.store.base import Backend, Tx

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ackledger"
STORE = PACKAGE / "store"
DIALECTS = sorted(
    path.name
    for path in STORE.iterdir()
    if (path / "tx.py").is_file() and (path / "queries.py").is_file()
)

#: What names the database outside the store: reading a backend's ``dialect``, telling a
#: target's or a connection's kind, the dialects' own words, a dialect package's import.
WORDS = frozenset({"sqlite", "postgres", "postgresql"})
CALLS = frozenset({"is_postgres", "target_dialect", "get_backend_name", "vendor", "dialect"})

#: The places outside ``store/`` that still name a database, each with its reason:
#: (module path under ``src/ackledger``, what it names). An entry no longer needed fails.
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        # ``migrate --sql --dialect``: the user names the kind of database the script is for.
        ("cli/migrate.py", "target_dialect"),
        ("cli/migrate.py", ".dialect"),
        # The optional extras are named after what they install; this maps modules to them.
        ("_core/extras.py", "'postgres'"),
    }
)


def _named(node: ast.AST) -> str | None:
    """What ``node`` names of a database, in the form ``ALLOWED`` lists, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS:
        return repr(node.value)
    if isinstance(node, ast.Attribute) and node.attr in CALLS:
        return "." + node.attr
    if isinstance(node, ast.Name) and node.id in CALLS - {"dialect"}:
        return node.id
    if isinstance(node, ast.alias) and node.name in CALLS:
        return node.name
    if isinstance(node, ast.ImportFrom) and node.module:
        parts = node.module.split(".")
        if "store" in parts and set(parts) & set(DIALECTS):
            return f"from {node.module}"
    return None


def names_outside_store() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = _named(node)
            if named is not None:
                found.add((relative.as_posix(), named))
    return found


def test_there_are_dialects_to_check() -> None:
    assert {"postgres", "sqlite"} <= set(DIALECTS)


def test_nothing_outside_the_store_names_the_database() -> None:
    found = names_outside_store()
    assert found - ALLOWED == set(), "outside store/: ask the Backend, not which database"
    assert ALLOWED - found == set(), "an allowed entry is no longer needed: remove it"


def test_the_check_sees_a_branch_on_the_dialect() -> None:
    branch = ast.parse('if backend.dialect == "sqlite":\n    pass\n')
    seen = {_named(node) for node in ast.walk(branch)} - {None}
    assert seen == {".dialect", "'sqlite'"}
    imported = ast.parse("from ..store.postgres.tx import PostgresTx\n")
    assert {_named(node) for node in ast.walk(imported)} - {None} == {"from store.postgres.tx"}


def _dialect_classes(dialect: str) -> tuple[type[Tx], type[Backend]]:
    tx_module = importlib.import_module(f"ackledger.store.{dialect}.tx")
    backend_module = importlib.import_module(f"ackledger.store.{dialect}.backend")
    (tx,) = [
        cls
        for cls in vars(tx_module).values()
        if inspect.isclass(cls) and issubclass(cls, Tx) and cls.__module__ == tx_module.__name__
    ]
    (backend,) = [
        cls
        for cls in vars(backend_module).values()
        if inspect.isclass(cls)
        and issubclass(cls, Backend)
        and cls.__module__ == backend_module.__name__
    ]
    return tx, backend


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_implements_every_abstract_operation(dialect: str) -> None:
    tx, backend = _dialect_classes(dialect)
    assert Tx.__abstractmethods__, "Tx declares the operations whose SQL differs"
    assert tx.__abstractmethods__ == frozenset(), f"{tx.__name__} lacks operations"
    assert backend.__abstractmethods__ == frozenset(), f"{backend.__name__} lacks operations"
    for name in Tx.__abstractmethods__:
        # Written in the dialect's own module, not inherited from the other dialect's Tx.
        owner = next(cls for cls in tx.__mro__ if name in vars(cls))
        assert owner.__module__.startswith(f"ackledger.store.{dialect}."), (name, owner)
        # Called by keyword too: the same parameters, by name, as the operation declares.
        declared = inspect.signature(getattr(Tx, name)).parameters
        assert list(inspect.signature(getattr(tx, name)).parameters) == list(declared), name
    # Nothing a caller could reach past Tx: a dialect's extra operation would be a branch.
    extra = {name for name in vars(tx) if not name.startswith("_") and not hasattr(Tx, name)}
    assert extra == _declared_only(), f"{tx.__name__}: operations Tx does not declare"
    # The expressions the shared SQL is rendered with (declared, never given, by Tx's bases).
    for name in _declared_only():
        assert getattr(tx, name) == getattr(_queries(dialect), name), name
    assert backend.dialect == dialect


def _declared_only() -> set[str]:
    return {
        name
        for cls in Tx.__mro__
        for name in getattr(cls, "__annotations__", {})
        if name.isupper() and not hasattr(Tx, name)
    }


def _queries(dialect: str) -> object:
    return importlib.import_module(f"ackledger.store.{dialect}.queries")


def _statements(dialect: str) -> set[str]:
    """The statements ``queries.py`` writes itself (not those it imports to build on)."""
    tree = ast.parse((STORE / dialect / "queries.py").read_text(encoding="utf-8"))
    return {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id.isupper()
    }


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_statement_of_a_dialect_is_run_by_that_dialect(dialect: str) -> None:
    statements = _statements(dialect)
    assert statements >= _declared_only()
    folder = STORE / dialect
    source = (folder / "queries.py").read_text(encoding="utf-8")
    others = " ".join(
        path.read_text(encoding="utf-8")
        for path in folder.glob("*.py")
        if path.name != "queries.py"
    )

    def uses(text: str, name: str) -> int:
        return len(re.findall(rf"\b{name}\b", text))

    # Used by the dialect's code, or a part of another statement of its queries.py.
    unused = {name for name in statements if not uses(others, name) and uses(source, name) < 2}
    assert unused == set(), f"{dialect}/queries.py: statements nothing runs"
