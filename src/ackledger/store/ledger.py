"""The idempotency ledger's deliveries and attempts.

A request is one typed operation (``ledger_record``) because the two databases do it in
different ways: SQLite's one writer allows two statements, PostgreSQL's many writers take a
lock per key first. The claim of a business key is ``keys.DELIVERIES`` on both.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import Any

from .._core.idempotency import Outcome
from .counters import CounterQueries
from .keys import DELIVERIES

DELIVERY_COLUMNS = (
    "delivery_no", "case_id", "work_id", "mode", "pod_uid", "fingerprint", "created_at",
    "state", "result", "completed_at", "completed_by", "claimed_by", "claimed_at",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "attempt_no", "case_id", "work_id", "pod_uid", "mode", "delivery_no", "outcome", "at",
    "claim", "exit_status",
)  # fmt: skip
#: What a delivery says about its work (migration 0008): the first two are its outcome, the
#: rest its live claim, all NULL when nobody holds one.
OUTCOME_COLUMNS = (
    "state", "result", "completed_at", "completed_by", "claim_token", "claimed_by", "claimed_at",
)  # fmt: skip

#: Keys per transaction of ``ledger_purge_idle_chunk``.
PURGE_CHUNK = 500

# Same parameters as the claim (keys.DELIVERIES): key, fingerprint, pod_uid, now. The
# comparison group: a plain insert, no key is looked up, every call is a delivery.
INSERT_CONTROL = (
    "INSERT INTO ackledger_deliveries (case_id, work_id, fingerprint, mode, pod_uid, created_at) "
    "VALUES (?, ?, ?, 'control', ?, ?) RETURNING delivery_no"
)
#: Every attempt row is written with these columns, whichever statement writes it.
INSERT_ATTEMPT = (
    "INSERT INTO ackledger_attempts (case_id, work_id, pod_uid, mode, delivery_no, outcome, "
    "fingerprint, at) "
)


# The outcome statements are the same text on both databases. Every one runs inside a write
# transaction that holds the key's turn (``ledger_lock_keys``; SQLite's one writer), so a read
# followed by an update of one key cannot interleave with another request for it.
_OUTCOME = f"SELECT {', '.join(OUTCOME_COLUMNS)} FROM ackledger_deliveries WHERE delivery_no = ?"
_TAKE_CLAIM = (
    "UPDATE ackledger_deliveries SET claim_token = ?, claimed_by = ?, claimed_at = ? WHERE "
    "delivery_no = ?"
)
# The newest attempt of the key is the request being recorded: it holds the key's turn.
_NOTE_CLAIM = (
    "UPDATE ackledger_attempts SET claim = ?, claim_token = ? WHERE attempt_no = (SELECT "
    "MAX(attempt_no) "
    "FROM ackledger_attempts WHERE case_id = ? AND work_id = ?)"
)
_CLAIMED_DELIVERY = (
    "SELECT delivery_no FROM ackledger_attempts WHERE case_id = ? AND work_id = ? AND "
    "claim_token = ?"
)
_COMPLETE = (
    "UPDATE ackledger_deliveries SET state = 'completed', result = ?, completed_at = ?, "
    "completed_by = ?, "
    "claim_token = NULL, claimed_by = NULL, claimed_at = NULL "
    "WHERE delivery_no = ? AND state = 'in_progress' RETURNING delivery_no"
)
_RELEASE = (
    "UPDATE ackledger_deliveries SET claim_token = NULL, claimed_by = NULL, claimed_at = NULL "
    "WHERE delivery_no = ? AND claim_token = ? RETURNING delivery_no"
)
# Only the first report counts: a complete after a release (or the other way) keeps it.
_EXIT_STATUS = (
    "UPDATE ackledger_attempts SET exit_status = ? "
    "WHERE case_id = ? AND work_id = ? AND claim_token = ? AND exit_status IS NULL"
)


class LedgerQueries(CounterQueries):
    @abc.abstractmethod
    def ledger_lock_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        """Take the turn of every key for the rest of the transaction, in one order for all
        callers (taken in request order, two transactions naming the same keys in other
        order would deadlock). A database with one writer has nothing to take."""

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

    def ledger_outcome(self, delivery_no: int) -> dict[str, Any]:
        """The delivery's ``OUTCOME_COLUMNS`` (``result`` as its stored JSON text)."""
        row = self.one(_OUTCOME, (delivery_no,))
        if row is None:  # pragma: no cover - the caller found the delivery in this transaction
            raise RuntimeError(f"deliveries: delivery {delivery_no} vanished inside a transaction")
        return dict(zip(OUTCOME_COLUMNS, row, strict=True))

    def ledger_take_claim(self, delivery_no: int, token: str, pod_uid: str, now: float) -> None:
        self.execute(_TAKE_CLAIM, (token, pod_uid, now, delivery_no))

    def ledger_note_claim(self, case_id: str, work_id: str, claim: str, token: str | None) -> None:
        """What the request being recorded (the key's newest attempt) did with the claim."""
        self.execute(_NOTE_CLAIM, (claim, token, case_id, work_id))

    def ledger_key_delivery(self, case_id: str, work_id: str, token: str | None) -> int | None:
        """The delivery a claim ``token`` was handed out for, else (no token) the key's
        idempotent delivery; None if there is none."""
        if token is None:
            found = DELIVERIES.find(self, (case_id, work_id))
            return None if found is None else int(found[1])
        value = self.scalar(_CLAIMED_DELIVERY, (case_id, work_id, token))
        return None if value is None else int(value)

    def ledger_complete(
        self, delivery_no: int, result: str | None, pod_uid: str | None, now: float
    ) -> bool:
        """Record the work as finished, and drop its claim; False if it already was."""
        return bool(self.execute(_COMPLETE, (result, now, pod_uid, delivery_no)))

    def ledger_release(self, delivery_no: int, token: str) -> bool:
        """Drop the claim ``token`` if it still holds the delivery (it may have been taken
        over); True if it did."""
        return bool(self.execute(_RELEASE, (delivery_no, token)))

    def ledger_exit_status(self, case_id: str, work_id: str, token: str, status: int) -> None:
        """The claimer's report on the attempt that took the claim ``token``."""
        self.execute(_EXIT_STATUS, (status, case_id, work_id, token))

    def ledger_deliveries(
        self, case_id: str | None, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self._ledger_rows(
            "ackledger_deliveries",
            DELIVERY_COLUMNS,
            "delivery_no",
            case_id,
            after=after,
            limit=limit,
        )

    def ledger_attempts(
        self, case_id: str | None, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self._ledger_rows(
            "ackledger_attempts", ATTEMPT_COLUMNS, "attempt_no", case_id, after=after, limit=limit
        )

    def ledger_attempts_of(self, delivery_nos: Sequence[int]) -> list[dict[str, Any]]:
        """The attempts that led to these deliveries, in arrival order (index
        ``attempts_delivery``): the console's page of keys shows each with its attempts."""
        if not delivery_nos:
            return []
        marks = ", ".join("?" * len(delivery_nos))
        rows = self.execute(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM ackledger_attempts WHERE delivery_no "
            f"IN ({marks}) "
            "ORDER BY attempt_no",
            tuple(delivery_nos),
        )
        return [dict(zip(ATTEMPT_COLUMNS, row, strict=True)) for row in rows]

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
