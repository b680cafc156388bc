"""SQLite's transaction: the operations whose SQL is SQLite's own.

One writer at a time is what every choice here leans on: a request needs no key lock, a
counter needs no spreading, a count read before a DELETE cannot be overtaken.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._core.idempotency import Claim, Outcome
from ..base import Params, Row, Tx
from ..claims import claim_once
from ..counters import BUMP_TWO, bump_statement
from ..inbox import ARRIVAL, INBOX_FINGERPRINT
from ..keys import DELIVERIES, MANY, OUTBOX, inbox_claim_rows_sql
from ..ledger import INSERT_CONTROL, PURGE_CHUNK
from ..outbox import MARK_ONE, Place, mark_one_params, outbox_claim_row
from . import queries as q

_OUTCOMES = {outcome.value: outcome for outcome in Outcome}


def note_lone(
    conn: sqlite3.Connection, source: str, event_id: str, now: float, counted: str, *, name: str
) -> None:
    """A lone re-send's note in ``conn``'s open write transaction: the note reads its arrival
    number in its own statement, then the ``counted`` outcome's
    and the arrival number's counts in one upsert (``SqliteBackend.inbox_read_or_note``)."""
    conn.execute(q.NOTE_RECEIPT_NEXT, (now, 1, name, source, event_id))
    conn.execute(BUMP_TWO, (ARRIVAL, 1, counted, 1))


class SqliteTx(Tx):
    CLOCK = q.CLOCK
    NEXT_FENCE = q.NEXT_FENCE

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        self._conn.executemany(sql, [tuple(p) for p in params])

    # ``Executor``'s own less a Python frame (``scalar`` over ``one`` over ``execute``): a
    # lone event runs two or three of these (the read by key, the arrival counter).
    def scalar(self, sql: str, params: Params = ()) -> Any:
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None

    # --- outbox ----------------------------------------------------------------------------

    def outbox_place(self) -> Place | None:
        # A table has no identity of its own here (a recreated one may get the same root
        # page): the schema's version, which any change of it bumps, stands for it.
        version, meta, outbox = self.execute(q.OUTBOX_PLACE)[0]
        return Place(version, version if outbox else None, "main") if meta else None

    def outbox_enqueue(
        self,
        event: dict[str, Any],
        text: str,
        fingerprint: str,
        partition_key: str,
        now: float,
        *,
        place: Place | None = None,
    ) -> Claim | None:
        # Nothing to lock: the one writer's inserts commit in seq order already; nothing to
        # send: SQLite has no notifications between processes, relays poll.
        if place is not None and self.outbox_place() != place:
            return None
        row = outbox_claim_row(event, text, fingerprint, partition_key, now)
        return claim_once(self, OUTBOX, row[:1], fingerprint, row[2:])

    def outbox_mark_one(self, event_id: str, attempted: bool, now: float) -> bool:
        # The row count instead of RETURNING: ~25k instructions fewer per mark (a bare
        # script, callgrind). A matched row counts even when it
        # changes nothing (marked already, or quarantined: its hold kept), as RETURNING did.
        params = mark_one_params(event_id, attempted, now)
        return self._conn.execute(MARK_ONE, params).rowcount == 1

    def _delete_sent_before(self, cutoff: float) -> tuple[int, int]:
        row = self.one(q.COUNT_SENT, (cutoff,))
        count, attempts = (0, 0) if row is None else (int(row[0]), int(row[1]))
        if count:
            self.execute(q.DELETE_SENT, (cutoff,))
        return count, attempts

    # --- inbox -----------------------------------------------------------------------------

    def inbox_claim_all(self, rows: Sequence[Params]) -> list[Outcome]:
        """``InboxQueries.inbox_claim_all`` told by the row count instead of RETURNING (SQLite
        builds a table of its own for that clause). All rows taken is
        the common case; otherwise a row is this claim's when it holds the arrival number this
        claim gave it: numbers are taken under the one writer's lock, never twice."""
        conn = self._conn
        if len(rows) == 1:  # a lone event's: its row is its parameters
            taken = conn.execute(inbox_claim_rows_sql(1, False), rows[0]).rowcount
        else:
            taken = 0
            for start in range(0, len(rows), MANY):
                chunk = rows[start : start + MANY]
                params = tuple(itertools.chain.from_iterable(chunk))
                taken += conn.execute(inbox_claim_rows_sql(len(chunk), False), params).rowcount
        if taken == len(rows):
            return [Outcome.APPLIED] * len(rows)
        outcomes: list[Outcome] = []
        for name, source, event_id, fingerprint, *rest in rows:
            key = (name, source, event_id)
            stored, arrival = conn.execute(q.INBOX_CLAIMED_AS, key).fetchone()
            if arrival == rest[-1]:
                outcomes.append(Outcome.APPLIED)
            else:
                same = stored == fingerprint
                outcomes.append(Outcome.DUPLICATE if same else Outcome.CONFLICT)
        return outcomes

    def inbox_fingerprint(self, name: str, source: str, event_id: str) -> str | None:
        """The read by key of every lone event, on the connection itself."""
        found = self._conn.execute(INBOX_FINGERPRINT, (name, source, event_id)).fetchone()
        return None if found is None else str(found[0])

    def inbox_note_lone(
        self, name: str, source: str, event_id: str, now: float, counted: str
    ) -> None:
        """``InboxQueries.inbox_note_lone``'s two statements on the connection itself."""
        note_lone(self._conn, source, event_id, now, counted, name=name)

    def inbox_reserve_arrivals(
        self, count: int, ahead: Mapping[str, int] | None = None
    ) -> tuple[int, dict[str, int]]:
        """The counter as it stands, and its bump (with ``ahead``) left to the caller's
        ``counters_bump``: the transaction holds the one writer's lock from its BEGIN
        IMMEDIATE, so nothing else takes these numbers before it commits (or rolls back,
        taking none)."""
        found = self._conn.execute(q.ARRIVALS_TAKEN).fetchone()
        owed = {ARRIVAL: count, **ahead} if ahead else {ARRIVAL: count}
        return (0 if found is None else int(found[0])), owed

    # --- counters --------------------------------------------------------------------------

    def counters_bump(self, counts: Mapping[str, int]) -> None:
        """``CounterQueries.counters_bump`` on the connection itself, its row count unread:
        every write transaction of the sink ends with one."""
        if counts:
            self._conn.execute(*bump_statement(counts))

    def counter_bump_spread(self, name: str) -> None:
        self.counter_bump(name)  # one writer at a time anyway: one row

    # --- ledger ----------------------------------------------------------------------------

    def ledger_lock_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        """Nothing to take: the write transaction holds the one writer's lock."""

    def ledger_record(
        self, *, case_id: str, work_id: str, pod_uid: str, mode: str, fingerprint: str, now: float
    ) -> tuple[Outcome, int, int]:
        """Two statements: the claim, the same ``INSERT ... ON CONFLICT DO NOTHING`` on the
        unique key index as everywhere (``keys.DELIVERIES``); then the comparison of
        fingerprints, the attempt row, its number and the counters (a trigger) in one more.
        Correct because nothing else changes the key between the claim and the count.
        """
        # The statements are run directly rather than through claims.claim_once: at two
        # statements a request, each layer of Python calls is a measurable share.
        claimed = self.execute(
            INSERT_CONTROL if mode == "control" else DELIVERIES.claim_sql,
            (case_id, work_id, fingerprint, pod_uid, now),
        )
        if claimed:
            delivery_no = claimed[0][0]
            rows = self.execute(
                q.RECORD_APPLIED,
                (case_id, work_id, pod_uid, mode, delivery_no, fingerprint, now, case_id, work_id),
            )
            return Outcome.APPLIED, int(delivery_no), int(rows[0][0])
        rows = self.execute(
            q.RECORD_SEEN,
            (
                pod_uid, fingerprint, fingerprint, fingerprint, now, case_id, work_id,
                case_id, work_id, case_id, work_id,
            ),
        )  # fmt: skip
        if not rows:  # pragma: no cover - the claim saw the key, so it must be there
            raise RuntimeError(
                f"deliveries: key {(case_id, work_id)!r} vanished inside a transaction"
            )
        outcome, found, attempt = rows[0]
        return _OUTCOMES[outcome], int(found), int(attempt)

    def ledger_purge_idle_chunk(
        self, cutoff: float, after: tuple[str, str], limit: int = PURGE_CHUNK
    ) -> tuple[int, int, tuple[str, str] | None]:
        """Up to ``limit`` idle keys after ``after``, whole. The purge goes in chunks here too,
        each its own short write transaction: the one writer is free between them, so a
        service on the same file waits milliseconds for a chunk, not seconds for a purge."""
        found = self.execute(q.IDLE_KEYS, (*after, cutoff, limit))
        if not found:
            return 0, 0, None
        keys = [(str(case_id), str(work_id)) for case_id, work_id in found]
        flat = tuple(part for key in keys for part in key)
        # Attempts first (they refer to the deliveries); a key's deliveries all carry its key.
        gone_attempts = self.execute(q.delete_keys("ackledger_attempts", len(keys)), flat)
        gone_deliveries = self.execute(q.delete_keys("ackledger_deliveries", len(keys)), flat)
        return len(gone_deliveries), len(gone_attempts), keys[-1]

    # --- partition leases ------------------------------------------------------------------

    def _lease_token_taken(self, token: int) -> None:
        self.execute(q.STORE_FENCE, (token,))

    def _mark_many_under_lease(
        self,
        key: str,
        owner: str,
        token: int,
        event_ids: Sequence[str],
        *,
        ttl: float,
        bump: int,
        now: float,
    ) -> int:
        # One statement per event (in-process, no round trips), up to the first one that was
        # not marked; the caller's transaction rolls back a partial mark.
        marked = 0
        for event_id in dict.fromkeys(event_ids):
            params = (now, bump, bump, now, event_id, key, owner, token)
            if not self.execute(self._lease_sql(q.MARK_UNDER_LEASE), params):
                break
            marked += 1
        if marked:
            self.lease_renew(key, owner, token, ttl)
        return marked

    def lease_ensure_partition_index(self) -> bool:
        if self.one(q.FIND_PARTITION_INDEX, (q.PARTITION_INDEX,)):
            return False
        self.execute(q.CREATE_PARTITION_INDEX)
        return True
