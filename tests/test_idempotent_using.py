"""``@ledger.idempotent(..., using_arg=...)`` with every kind of caller's connection that
``publish(using=)`` takes (tests/test_borrowed.py drives each as an application would): the key
and its result commit with the caller's own writes, a rollback removes both, and a repeat in a
later transaction replays the result without running the function."""

from __future__ import annotations

from typing import Any

from ackledger import Ledger
from ackledger.store.borrowed import borrow

from .test_borrowed import Caller, Database, case, pg_db, sqlite_db  # noqa: F401  (fixtures)


def _keys(db: Database) -> list[tuple[Any, ...]]:
    return db.rows("SELECT key, state, result FROM ackledger_idempotency_keys ORDER BY key")


def test_the_key_commits_and_rolls_back_with_the_callers_writes(
    case: tuple[Database, Caller],  # noqa: F811 - the fixture imported above
) -> None:
    db, caller = case
    runs: list[str] = []
    with Ledger(db.ref) as ledger:

        @ledger.idempotent(key=lambda using, order_id: order_id, using_arg="using")
        def place(using: object, order_id: str) -> dict[str, str]:
            runs.append(order_id)
            # The function's own write, on the connection it was given (whatever its kind).
            borrow(using, db.dialect).execute(
                "INSERT INTO business (id, note) VALUES (?, 'by the app')", (order_id,)
            )
            return {"placed": order_id}

        caller.begin()
        assert caller.within(lambda using: place(using, "order-1")) == {"placed": "order-1"}
        assert _keys(db) == []  # nothing committed yet
        caller.commit()
        assert db.durable()[0] == ["order-1"]
        assert _keys(db) == [("order-1", "completed", '{"placed":"order-1"}')]

        caller.begin()
        assert caller.within(lambda using: place(using, "order-1")) == {"placed": "order-1"}
        caller.commit()
        assert runs == ["order-1"]

        caller.begin()
        caller.within(lambda using: place(using, "order-2"))
        caller.rollback()
        assert db.durable()[0] == ["order-1"]
        assert [row[0] for row in _keys(db)] == ["order-1"]
