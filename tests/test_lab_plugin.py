"""The lab is a plug-in like any domain could be (CONTRACT §1, §11): registered when
``ackledger`` is imported, its handler an ordinary one a user's replaces, and the registry it
goes through serves any plug-in the same way."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import ackledger
from ackledger import (
    Conflict,
    EventTypes,
    Inbox,
    InvalidEvent,
    Outbox,
    new_event,
    plugins,
    warehouse,
)
from ackledger.sink.handler_tx import HandlerTransaction
from tests.conftest import raw_rows

TYPE = "com.example.plugged"
SOURCE = "urn:tests:plugged"


def _check(data: Any) -> Any:
    if not isinstance(data, dict) or set(data) != {"n"}:
        raise InvalidEvent("must be {n}")
    return data


def _handler(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    tx.execute("INSERT INTO plugged (id, n) VALUES (?, ?)", (event["id"], event["data"]["n"]))


def _former(event: Mapping[str, Any]) -> str | None:
    if event.get("source") != SOURCE:
        return None
    return f"former-{event['id']}-{event['data']['n']}"


def _tables(dialect: str) -> str:
    return "CREATE TABLE IF NOT EXISTS plugged (id TEXT PRIMARY KEY, n INTEGER);\n"


@pytest.fixture
def plugged(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The registry as it is, plus one plug-in, for this test only.
    monkeypatch.setattr(plugins, "_PLUGINS", dict(plugins._PLUGINS))
    plugins.register(plugins.Plugin(TYPE, _check, _handler, _former, tables=_tables))
    yield


def test_the_lab_is_registered_when_ackledger_is_imported() -> None:
    assert EventTypes().schema(warehouse.TYPE) is warehouse.check_data
    assert plugins.handlers()[warehouse.TYPE] is warehouse.apply


CORE = ("envelope", "store", "sink", "source", "wire", "event_types.py", "plugins.py")


def test_the_core_imports_nothing_of_the_lab() -> None:
    root = Path(ackledger.__file__).parent
    files = [
        p
        for part in CORE
        for p in ([root / part] if part.endswith(".py") else (root / part).rglob("*.py"))
    ]
    assert len(files) > 40
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(alias.name for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not [n for n in names if "warehouse" in n], f"{path} imports the lab"


#: The core's parts that may not name the lab: its packages below the plug-ins.
NAMELESS = ("envelope", "store", "sink", "source", "wire")
#: The lab's words: its tables, their columns, its name.
LAB_WORDS = re.compile(r"\b(sku|skus|qty|inventory|orders|warehouse)\b", re.IGNORECASE)
#: Where a lab word stays, each for its reason: (file under the package, word).
NAMED_FOR_A_REASON = {
    # The contract's own signature, ``Inbox.stock(sku)``: a caller may pass it by keyword.
    ("sink/inbox.py", "sku"),
}


def _frozen_migration(relative: str) -> bool:
    """A numbered migration (``store/migrations/<dialect>/[v2/]NNNN_*.sql``): history that a
    database has applied, with v1's lab columns in it; it is never edited in its meaning."""
    parts = relative.split("/")
    return parts[:2] == ["store", "migrations"] and parts[-1][:4].isdigit()


def test_the_core_names_no_lab_table_column_or_domain() -> None:
    root = Path(ackledger.__file__).parent
    found: set[tuple[str, str]] = set()
    read = 0
    for part in NAMELESS:
        for path in sorted((root / part).rglob("*")):
            relative = path.relative_to(root).as_posix()
            if path.suffix not in (".py", ".sql") or _frozen_migration(relative):
                continue
            read += 1
            for word in LAB_WORDS.findall(path.read_text(encoding="utf-8")):
                found.add((relative, word.lower()))
    assert read > 60
    assert sorted(found - NAMED_FOR_A_REASON) == []
    assert sorted(NAMED_FOR_A_REASON - found) == [], "no longer named: take these off the list"


def test_the_check_for_lab_words_finds_one() -> None:
    words = LAB_WORDS.findall('has_table(tx, "Orders"); data["sku"]; skustock; sum(qty)')
    assert [word.lower() for word in words] == ["orders", "sku", "qty"]
    assert _frozen_migration("store/migrations/sqlite/0007_cloudevents.sql")
    assert _frozen_migration("store/migrations/postgres/v2/0001_initial.sql")
    assert not _frozen_migration("store/plugin_tables.py")


def test_a_users_handler_replaces_the_labs(tmp_path: Path) -> None:
    seen: list[str] = []
    inbox = Inbox(
        tmp_path / "sink.db", handlers={warehouse.TYPE: lambda tx, e: seen.append(e["id"])}
    )
    try:
        assert inbox.runs_user_code
        assert inbox.receive(warehouse.event("w-1", "tea", 3)) == "applied"
        assert seen == ["w-1"]
        assert inbox.stock("tea") == 0  # the lab's handler never ran
    finally:
        inbox.close()
    with Inbox(tmp_path / "lab.db") as lab:
        assert not lab.runs_user_code
        assert lab.receive_batch([warehouse.event("w-1", "tea", 3)] * 2).statuses == [
            "applied",
            "duplicate",
        ]
        assert lab.stock("tea") == 3


def test_any_plugin_gets_its_schema_handler_and_former_fingerprint(
    plugged: None, tmp_path: Path
) -> None:
    with pytest.raises(InvalidEvent):
        EventTypes().check(TYPE, {"m": 1})
    inbox = Inbox(tmp_path / "sink.db")
    try:
        # Its tables are made by its first event, by the store's hook, not by opening.
        assert (
            raw_rows(tmp_path / "sink.db", "SELECT name FROM sqlite_master WHERE name = 'plugged'")
            == []
        )
        assert not inbox.runs_user_code  # a plug-in's handler is not the user's
        assert inbox.receive(new_event(TYPE, {"n": 1}, source=SOURCE, id="p-1")) == "applied"
        # A receipt stored by an older version holds the former fingerprint: the same event.
        with inbox._db.write() as tx:
            tx.execute("UPDATE ackledger_inbox SET fingerprint = 'former-p-1-1' WHERE id = 'p-1'")
        assert inbox.receive(new_event(TYPE, {"n": 1}, source=SOURCE, id="p-1")) == "duplicate"
        with pytest.raises(Conflict):
            inbox.receive(new_event(TYPE, {"n": 2}, source=SOURCE, id="p-1"))
        assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 1}
    finally:
        inbox.close()
    assert raw_rows(tmp_path / "sink.db", "SELECT id, n FROM plugged") == [("p-1", 1)]


def test_accept_and_stock_go_through_the_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with Outbox(tmp_path / "source.db", source="urn:tests:lab") as outbox:
        assert outbox.accept({"id": "o-1", "sku": "tea", "qty": 2}) == 1
        assert outbox.order("o-1") is not None
    monkeypatch.setattr(plugins, "_PLUGINS", {})
    with Outbox(tmp_path / "source.db") as outbox, pytest.raises(LookupError):
        outbox.accept({"id": "o-2", "sku": "tea", "qty": 2})
