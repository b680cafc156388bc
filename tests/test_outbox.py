from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ackledger import Conflict, InvalidEvent, Outbox
from ackledger.store.sqlite import PAGE_SIZE
from tests.conftest import raw_connect, raw_rows


def ev(event_id: str, sku: str = "snack", qty: int = 1) -> dict[str, object]:
    return {"id": event_id, "sku": sku, "qty": qty}


def counts(path: Path) -> tuple[object, object]:
    orders = raw_rows(path, "SELECT count(*) FROM orders")[0][0]
    outbox = raw_rows(path, "SELECT count(*) FROM outbox")[0][0]
    return orders, outbox


def test_accept_writes_order_and_event_together(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        seq = outbox.accept(ev("o-1", qty=7))
    assert raw_rows(source_db, "SELECT id, sku, qty FROM orders") == [("o-1", "snack", 7)]
    assert raw_rows(source_db, "SELECT seq, id, sku, qty, sent FROM outbox") == [
        (seq, "o-1", "snack", 7, 0)
    ]


def test_accepting_the_same_event_again_writes_nothing(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        first = outbox.accept(ev("o-1"))
        outbox.accept(ev("o-2"))
        again = outbox.accept({"qty": 1, "sku": "snack", "id": "o-1"})
    assert again == first
    assert counts(source_db) == (2, 2)


def test_same_id_other_content_is_a_conflict_and_writes_nothing(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ev("o-1", qty=1))
        with pytest.raises(Conflict, match="o-1"):
            outbox.accept(ev("o-1", qty=2))
    assert counts(source_db) == (1, 1)
    assert raw_rows(source_db, "SELECT qty FROM outbox") == [(1,)]


def test_invalid_event_writes_nothing(source_db: Path) -> None:
    with Outbox(source_db) as outbox, pytest.raises(InvalidEvent, match="qty"):
        outbox.accept({"id": "o-1", "sku": "s", "qty": True})
    assert counts(source_db) == (0, 0)


def test_transaction_commits_business_write_and_event_together(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        with outbox.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS shipments (id TEXT PRIMARY KEY, note TEXT)")
        with outbox.transaction() as tx:
            tx.execute("INSERT INTO shipments (id, note) VALUES (?, ?)", ("s-1", "boxed"))
            seq = tx.enqueue(ev("ship-1"))
        assert outbox.pending() == [{"seq": seq, "id": "ship-1", "sku": "snack", "qty": 1}]
    assert raw_rows(source_db, "SELECT id FROM shipments") == [("s-1",)]


def test_transaction_rolls_back_both_on_error(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        with outbox.transaction() as tx:
            tx.execute("CREATE TABLE shipments (id TEXT PRIMARY KEY)")
        with pytest.raises(RuntimeError), outbox.transaction() as tx:
            tx.execute("INSERT INTO shipments (id) VALUES (?)", ("s-1",))
            tx.enqueue(ev("ship-1"))
            raise RuntimeError("business rule failed")
        with pytest.raises(InvalidEvent), outbox.transaction() as tx:
            tx.execute("INSERT INTO shipments (id) VALUES (?)", ("s-2",))
            tx.enqueue({"id": "bad id", "sku": "s", "qty": 1})
    assert raw_rows(source_db, "SELECT count(*) FROM shipments") == [(0,)]
    assert raw_rows(source_db, "SELECT count(*) FROM outbox") == [(0,)]


def test_pending_is_in_acceptance_order_not_id_order(source_db: Path) -> None:
    ids = ["z-last-alphabetically", "a-first", "m-middle", "b-second"]
    with Outbox(source_db) as outbox:
        seqs = [outbox.accept(ev(i)) for i in ids]
        pending = outbox.pending()
    assert seqs == sorted(seqs)
    assert [p["id"] for p in pending] == ids
    assert [p["seq"] for p in pending] == seqs
    assert all(set(p) == {"seq", "id", "sku", "qty"} for p in pending)


def test_pending_limit_and_sent_rows(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        for i in range(20):
            outbox.accept(ev(f"e-{i:02d}"))
        assert len(outbox.pending()) == 16
        assert [p["id"] for p in outbox.pending(3)] == ["e-00", "e-01", "e-02"]
        outbox.mark_sent("e-01")
        assert [p["id"] for p in outbox.pending(3)] == ["e-00", "e-02", "e-03"]


@pytest.mark.parametrize("limit", [0, 17, -1, True, False, 1.0, "3", None])
def test_pending_limit_must_be_an_int_from_1_to_16(source_db: Path, limit: object) -> None:
    with Outbox(source_db) as outbox, pytest.raises(ValueError, match="limit"):
        outbox.pending(limit)  # type: ignore[arg-type]


def test_pending_writes_nothing_and_leaves_no_transaction(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ev("o-1"))
        watcher = raw_connect(source_db)
        before = watcher.execute("PRAGMA data_version").fetchone()
        size_before = os.path.getsize(str(source_db) + "-wal")
        assert outbox.pending() and outbox.pending(1)
        # Another connection can take the write lock at once: no read lock upgraded, no tx open.
        other = sqlite3.connect(source_db, isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        other.close()
        assert not outbox.backend.in_transaction()  # type: ignore[attr-defined]
        assert watcher.execute("PRAGMA data_version").fetchone() == before
        assert os.path.getsize(str(source_db) + "-wal") == size_before
        watcher.close()


def test_mark_sent_is_idempotent_and_unknown_ids_raise(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ev("o-1"))
        outbox.mark_sent("o-1")
        outbox.mark_sent("o-1")
        assert outbox.pending() == []
        with pytest.raises(KeyError):
            outbox.mark_sent("nope")
    assert raw_rows(source_db, "SELECT sent FROM outbox") == [(1,)]


def test_several_outboxes_share_one_database(source_db: Path) -> None:
    with Outbox(source_db) as one, Outbox(source_db) as two:
        one.accept(ev("o-1"))
        two.accept(ev("o-2"))
        assert [p["id"] for p in one.pending()] == ["o-1", "o-2"]


def test_storage_settings(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        assert outbox.backend.synchronous == "FULL"  # type: ignore[attr-defined]
    with Outbox(source_db, synchronous="NORMAL") as outbox:
        assert outbox.backend.synchronous == "NORMAL"  # type: ignore[attr-defined]
    assert raw_rows(source_db, "PRAGMA journal_mode") == [("wal",)]
    with pytest.raises(ValueError, match="synchronous"):
        Outbox(source_db, synchronous="OFF")


def test_new_databases_get_small_pages_and_old_ones_keep_theirs(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    with Outbox(fresh) as outbox:
        outbox.accept(ev("p-1"))
    assert raw_rows(fresh, "PRAGMA page_size") == [(PAGE_SIZE,)]
    # A database made elsewhere (here: SQLite's default page size, then WAL) keeps its pages,
    # and everything still works in it.
    made = tmp_path / "made.db"
    conn = sqlite3.connect(made)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE mine (x)")
    conn.close()
    with Outbox(made) as outbox:
        outbox.accept(ev("p-2"))
        assert [p["id"] for p in outbox.pending()] == ["p-2"]
    assert raw_rows(made, "PRAGMA page_size") == [(4096,)]


def test_pending_reads_only_the_partial_index(source_db: Path) -> None:
    with Outbox(source_db):
        pass
    plan = raw_rows(
        source_db,
        "EXPLAIN QUERY PLAN SELECT seq, id, sku, qty FROM outbox "
        "WHERE sent = 0 AND quarantined = 0 ORDER BY seq LIMIT 16",
    )
    details = " ".join(str(row[-1]) for row in plan)
    assert "outbox_pending" in details
    assert "TEMP B-TREE" not in details


def test_bad_targets(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Outbox(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="directory"):
        Outbox(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        Outbox(tmp_path / "missing" / "x.db")
    with pytest.raises(ValueError, match="scheme"):
        Outbox("mysql://localhost/x")


def test_an_order_whose_event_was_purged_cannot_be_accepted_again(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ev("o-1"))
        outbox.mark_sent("o-1")
        with outbox.transaction() as tx:  # what a purge leaves: the order without its event
            tx.execute("DELETE FROM outbox WHERE id = ?", ("o-1",))
        with pytest.raises(Conflict, match="purged"):
            outbox.accept(ev("o-1"))
    assert counts(source_db) == (1, 0)
