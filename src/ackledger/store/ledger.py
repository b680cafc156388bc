"""The idempotency ledger's deliveries and attempts.

A request is one typed operation (``ledger_record``) because the two databases do it in
different ways: SQLite's one writer allows two statements, PostgreSQL's many writers take a
lock per key first. The claim of a business key is ``keys.DELIVERIES`` on both.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

from .._core.idempotency import Outcome
from .counters import CounterQueries

DELIVERY_COLUMNS = (
    "delivery_no", "case_id", "work_id", "mode", "pod_uid", "fingerprint", "created_at",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "attempt_no", "case_id", "work_id", "pod_uid", "mode", "delivery_no", "outcome", "at",
)  # fmt: skip

#: Keys per transaction of ``ledger_purge_idle_chunk``.
PURGE_CHUNK = 500

# Same parameters as the claim (keys.DELIVERIES): key, fingerprint, pod_uid, now. The
# comparison group: a plain insert, no key is looked up, every call is a delivery.
INSERT_CONTROL = (
    "INSERT INTO deliveries (case_id, work_id, fingerprint, mode, pod_uid, created_at) "
    "VALUES (?, ?, ?, 'control', ?, ?) RETURNING delivery_no"
)
#: Every attempt row is written with these columns, whichever statement writes it.
INSERT_ATTEMPT = (
    "INSERT INTO attempts (case_id, work_id, pod_uid, mode, delivery_no, outcome, fingerprint, at) "
)


class LedgerQueries(CounterQueries):
    @abc.abstractmethod
    def ledger_lock_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        """Take the turn of every key for the rest of the transaction, in one order for all
        callers (taken in request order, two transactions naming the same keys in other
        orders would deadlock). A database with one writer has nothing to take."""

    @abc.abstractmethod
    def ledger_record(
        self, *, case_id: str, work_id: str, pod_uid: str, mode: str, fingerprint: str, now: float
    ) -> tuple[Outcome, int, int]:
        """A whole request inside the write transaction: the delivery once per key (every
        time in control mode), an attempt row always, the counters. Returns (outcome, the
        key's delivery_no, this attempt's number)."""

    @abc.abstractmethod
    def ledger_purge_idle_chunk(
        self, cutoff: float, after: tuple[str, str], limit: int = PURGE_CHUNK
    ) -> tuple[int, int, tuple[str, str] | None]:
        """Forget up to ``limit`` keys, after the key ``after`` in key order (``("", "")`` is
        before every key), whose last attempt is before ``cutoff``. Returns (deliveries,
        attempts) removed and the last key looked at, the ``after`` of the next chunk (None:
        there was no key left). Each chunk is its own write transaction."""

    def ledger_deliveries(
        self, case_id: str | None, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self._ledger_rows(
            "deliveries", DELIVERY_COLUMNS, "delivery_no", case_id, after=after, limit=limit
        )

    def ledger_attempts(
        self, case_id: str | None, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self._ledger_rows(
            "attempts", ATTEMPT_COLUMNS, "attempt_no", case_id, after=after, limit=limit
        )

    def _ledger_rows(
        self,
        table: str,
        columns: tuple[str, ...],
        order: str,
        case_id: str | None,
        *,
        after: int | None,
        limit: int | None,
    ) -> list[dict[str, Any]]:
        """Rows in ``order``: those of ``case_id`` (or all), numbered after ``after``, at
        most ``limit`` of them (a page: the primary key's index finds its start)."""
        where: list[str] = []
        params: list[object] = []
        if case_id is not None:
            where.append("case_id = ?")
            params.append(case_id)
        if after is not None:
            where.append(f"{order} > ?")
            params.append(after)
        sql = f"SELECT {', '.join(columns)} FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self.execute(sql, tuple(params))
        return [dict(zip(columns, row, strict=True)) for row in rows]
