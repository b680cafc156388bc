"""The package's layers, read from its source: no module imports one from a layer above its own.

Each top-level module or package of ``ackledger`` belongs to one layer, bottom to top; a module
may import its own layer's modules and any below. Imports under ``if TYPE_CHECKING:`` are
exempt (they make no arrow at run time); imports inside functions count (they do). The check
reads the files with ``ast`` and imports nothing, so it also holds for the optional extras.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ackledger"

#: Bottom to top. Names in one tuple are one layer. ``peers`` layers' members may not import
#: each other: the outbox, the inbox and the ledger are three parts, not one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors"),  # leaves: the version and the error tree import nothing of ours
    ("_core",),  # small internals everything shares
    ("event_types", "envelope", "plugins"),  # the event: its types, envelope, plug-ins
    ("store",),  # the only SQL
    ("wire",),  # targets, senders, what counts as an ACK
    ("web",),  # the HTTP pieces both services and the /metrics endpoints are built of
    ("source", "sink", "ledger"),  # the outbox, the inbox, the ledger (and their apps)
    ("relay",),  # the loop that moves the outbox's events over the wire
    ("ops",),  # what operators run: status, trace, reconcile, verify, the console
    ("_dev",),  # the demo and the screenshots (not for users)
    ("cli",),  # argument parsing; each verb is one call into the layers below
    ("warehouse", "django"),  # plug-ins: a domain, a framework's shell
    ("event",),  # v1's names, re-exported from where they live (the lab's among them)
    ("__init__",),  # the public names, re-exported from every layer
)
PEERS = frozenset({"source", "sink", "ledger"})
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}

#: Upward imports that stay, each with its reason: (importing module, imported module). Each
#: one fixed comes off this list (a test fails while an entry is no longer needed).
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        # The operators' tools speak of the lab by name: verify's workload is the lab's events
        # (judged by its inventory), trace and reconcile explain an order row, and the CLI's
        # `accept` and `verify` are the lab's own commands.
        ("ackledger.ops.reconcile", "ackledger.warehouse"),
        ("ackledger.ops.trace", "ackledger.warehouse"),
        ("ackledger.ops.verify.campaign", "ackledger.warehouse"),
        ("ackledger.ops.verify.judge", "ackledger.warehouse"),
        ("ackledger.cli.source", "ackledger.warehouse"),
        ("ackledger.cli.verify", "ackledger.warehouse"),
        # ``--django`` of serve sink and consume: the command line opens the Django app's
        # inbox (the app's own ``manage.py ackledger`` calls back into the command line).
        ("ackledger.cli.sessions", "ackledger.django"),
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """``errors`` of ``ackledger.errors``, ``ops`` of ``ackledger.ops.verify.campaign``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under an ``if TYPE_CHECKING:``."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            found.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return found


def imports(module: str, source: str, *, is_package: bool) -> Iterator[tuple[str, int]]:
    """Each ``ackledger`` module that ``source`` (the text of ``module``) imports at run time,
    with its line."""
    tree = ast.parse(source)
    exempt = _type_checking_only(tree)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "ackledger":
                # ``from .. import warehouse``: each name is a module of the root package, or
                # a public name re-exported by its __init__.
                for alias in node.names:
                    named = f"ackledger.{alias.name}"
                    yield (named if layer_of(named) in RANK else "ackledger"), node.lineno
            else:
                yield target, node.lineno


def upward(importer: str, imported: str) -> bool:
    """True when ``importer`` may not import ``imported``: a higher layer, or a peer's."""
    if not imported.startswith("ackledger"):
        return False
    mine, theirs = layer_of(importer), layer_of(imported)
    if mine == theirs:
        return False
    if mine in PEERS and theirs in PEERS:
        return True
    return RANK[theirs] > RANK[mine]


def violations() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = path.read_text(encoding="utf-8")
        for imported, line in imports(module, source, is_package=path.name == "__init__.py"):
            if upward(module, imported):
                found.add((module, imported, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return found


def layer_module(imported: str) -> str:
    """The imported module as ALLOWED names it: ``ackledger.store`` for any module of it."""
    return ".".join(imported.split(".")[:2])


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {path.stem for path in PACKAGE.glob("*.py")}
    parts |= {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert sorted(parts - set(RANK)) == [], "place these in LAYERS"
    assert {"_core", "store", "relay", "ops", "cli", "warehouse"} <= parts


def test_no_import_points_up_the_layers() -> None:
    wrong = sorted(
        f"{where}: {importer} imports {imported}"
        for importer, imported, where in violations()
        if (importer, layer_module(imported)) not in ALLOWED
    )
    assert wrong == [], "\n".join(wrong)


def test_the_allow_list_holds_only_what_is_still_there() -> None:
    still = {(importer, layer_module(imported)) for importer, imported, _ in violations()}
    assert sorted(ALLOWED - still) == [], "these are fixed: take them off ALLOWED"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("ackledger._core.backoff", "from ..web.guard import loopback_host", True),
        ("ackledger._core.backoff", "def f():\n    from ..relay import loop", True),
        ("ackledger.relay.runner", "import ackledger.ops.probe", True),
        ("ackledger.source.dispatch", "from ..sink import inbox", True),  # a peer
        ("ackledger.ops.verify.faults", "from ... import cli", True),
        ("ackledger.store.outbox", "from .. import Outbox", True),  # the root's public names
        ("ackledger.relay.runner", "from ..source.outbox import Outbox", False),
        ("ackledger.ops.verify.faults", "from ..faultproxy import FaultProxy", False),
        (
            "ackledger.wire.http",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from ..relay.loop import Relay",
            False,
        ),  # a type-only import
        ("ackledger.cli.demo", "from .._dev.demo import run", False),
    ],
)
def test_the_check_tells_an_upward_import(module: str, source: str, expected: bool) -> None:
    found = [upward(module, imported) for imported, _ in imports(module, source, is_package=False)]
    assert found == [expected]
