"""SQLite's per-item mark (``Outbox.mark_sent`` of one id, durable) is one autocommit statement.

The UPDATE is all or nothing by itself for one id, so it needs no BEGIN IMMEDIATE and COMMIT
sent through Python around it (two fewer statements a mark); every other write keeps its
transaction. What the connection is asked to run is read from SQLite's own trace.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ackledger import Outbox


def traced(outbox: Outbox) -> list[str]:
    """The statements the outbox's main connection runs from now on, as SQLite reports them."""
    seen: list[str] = []
    conn: sqlite3.Connection = outbox.backend._conn  # type: ignore[attr-defined]
    conn.set_trace_callback(seen.append)
    return seen


def words(statements: list[str]) -> list[str]:
    return [statement.split()[0].upper() for statement in statements]


def test_a_durable_mark_of_one_id_is_one_statement(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db") as ob:
        ob.accept({"id": "e1", "sku": "s", "qty": 1})
        seen = traced(ob)
        ob.mark_sent("e1", attempted=True)
        assert words(seen) == ["UPDATE"]
        assert "RETURNING" not in seen[0].upper()  # the row count says it
        del seen[:]
        with pytest.raises(KeyError):
            ob.mark_sent("ghost")
        assert words(seen) == ["UPDATE"]  # nothing marked: nothing to roll back
    conn = sqlite3.connect(tmp_path / "o.db")
    try:
        rows: list[Any] = conn.execute("SELECT id, sent, attempts FROM ackledger_outbox").fetchall()
    finally:
        conn.close()
    assert rows == [("e1", 1, 1)]


def test_marks_of_several_ids_keep_their_transaction(tmp_path: Path) -> None:
    # Two ids are not all or nothing by one autocommit statement's own means when one is
    # unknown (the KeyError must roll the other back): they stay in BEGIN IMMEDIATE ... .
    with Outbox(tmp_path / "o.db") as ob:
        ob.accept({"id": "e1", "sku": "s", "qty": 1})
        seen = traced(ob)
        with pytest.raises(KeyError):
            ob.mark_sent_many(["e1", "ghost"])
        assert words(seen)[0] == "BEGIN" and words(seen)[-1] == "ROLLBACK"
        assert [item["id"] for item in ob.pending()] == ["e1"]


def test_a_failed_statement_leaves_no_transaction_open(tmp_path: Path) -> None:
    # Whatever fails inside ``statement`` (on SQLite, a commit's I/O error could leave the
    # transaction open) is not committed later by another write: the block's end rolls back.
    with Outbox(tmp_path / "o.db") as ob:
        ob.accept({"id": "e1", "sku": "s", "qty": 1})
        backend: Any = ob.backend
        with pytest.raises(RuntimeError), backend.statement() as tx:
            tx.execute("BEGIN")  # stands for a statement whose commit failed half-way
            tx.execute("UPDATE ackledger_outbox SET sent = 1 WHERE id = 'e1'")
            raise RuntimeError("the commit failed")
        assert not backend.in_transaction()
        ob.accept({"id": "e2", "sku": "s", "qty": 1})  # a later write commits only its own
        assert [item["id"] for item in ob.pending()] == ["e1", "e2"]


def test_a_mark_on_a_closed_outbox_raises_and_keeps_no_lock(tmp_path: Path) -> None:
    # A closed connection fails the statement's entry (``MarksBehind`` whose marker was
    # closed): the backend's lock must not stay with the thread that tried, or closing the
    # backend from another thread would wait for ever.
    ob = Outbox(tmp_path / "o.db")
    ob.accept({"id": "e1", "sku": "s", "qty": 1})
    backend: Any = ob.backend
    ob.close()
    with pytest.raises(sqlite3.ProgrammingError):
        ob.mark_sent("e1")
    closing = threading.Thread(target=backend.close, daemon=True)
    closing.start()
    closing.join(10)
    assert not closing.is_alive()
