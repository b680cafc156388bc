"""PostgreSQL's transaction: the operations whose SQL is PostgreSQL's own.

Many writers run at once here (every replica, every pooled connection), so what SQLite's one
writer gives for free is taken explicitly: advisory locks per partition and per ledger key,
counters spread over rows, DELETEs that count what they removed.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._core.idempotency import Claim, Outcome
from ..base import Params, Row, Tx
from ..claims import claim_once, claimed, outcomes_of_claim
from ..inbox import ARRIVAL, numbered_from
from ..keys import DELIVERIES, INBOX, MANY, OUTBOX, claim_inbox_rows
from ..ledger import INSERT_CONTROL, PURGE_CHUNK
from ..outbox import Place, outbox_claim_row
from . import queries as q

if TYPE_CHECKING:
    import psycopg

#: The ledger's counter of each outcome (SQLite bumps the same ones from a trigger, 0005).
_OUTCOME_COUNTER = {
    Outcome.APPLIED: "ledger.deliveries",
    Outcome.DUPLICATE: "ledger.duplicates",
    Outcome.CONFLICT: "ledger.conflicts",
}


@functools.lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s``; a literal ``%`` is doubled so it stays one."""
    return sql.replace("%", "%%").replace("?", "%s")


#: libpq's PGRES_TUPLES_OK (its ABI): the status of a result that holds rows.
_TUPLES_OK = 2


def has_rows(cursor: Any) -> bool:
    """Whether the statement a psycopg ``cursor`` just ran returned rows (a SELECT, a
    RETURNING). Read from its result's status: ``cursor.description`` would first build an
    object for each column, a share of a statement's client time worth saving."""
    result = cursor.pgresult
    return result is not None and result.status == _TUPLES_OK


class PostgresTx(Tx):
    CLOCK = q.CLOCK
    NEXT_FENCE = q.NEXT_FENCE

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._conn.execute(to_pyformat(sql), tuple(params))
        # Statements without a result (DDL, UPDATE without RETURNING) have no rows to fetch.
        return cursor.fetchall() if has_rows(cursor) else []

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(to_pyformat(sql), [tuple(p) for p in params])

    # --- outbox ----------------------------------------------------------------------------

    def outbox_place(self) -> Place | None:
        meta, outbox, schema = self.execute(q.OUTBOX_PLACE)[0]
        return None if meta is None else Place(meta, outbox, schema or "")

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
        # PostgreSQL hands out ``seq`` when a row is inserted, not when it commits: without
        # the partition's lock, a transaction could take seq 6, another seq 7 and commit
        # first, and a relay would send 7 before 6 of the same partition. Held until commit,
        # the lock makes the second enqueue into a partition draw its seq after the first one
        # committed; it is taken inside the statement, before the row's seq is drawn. The
        # wake-up is delivered at commit only (store/postgres/notify.py); on a caller's
        # connection it rides in the caller's transaction like the event's row.
        row = outbox_claim_row(event, text, fingerprint, partition_key, now)
        guard = () if place is None else (place.meta, place.outbox)
        sql = q.enqueue_sql(None if place is None else place.schema)
        took_turn, seq, _ = self.execute(
            sql, (q.PARTITION_LOCK_CLASS, partition_key, *guard, *row)
        )[0]
        if not took_turn:
            return None
        return claimed(self, OUTBOX, row[:1], fingerprint, seq)

    def outbox_mark_sent_whole(self, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
        unique = list(dict.fromkeys(ids))
        if len(unique) == 1:
            return self.outbox_mark_sent(unique, attempted, now)  # one row: all or none
        bump = 1 if attempted else 0
        marked = self.execute(q.MARK_ALL_OR_NONE, (unique, now, bump, bump, now))
        if len(marked) == len(unique):
            return []
        known = {str(row[0]) for row in self.execute(q.KNOWN_IDS, (unique,))}
        unknown = [event_id for event_id in ids if event_id not in known]
        # All known by now (none can have been marked: the count was short when it ran):
        # the plain UPDATE of known ids is one statement, all or nothing as well.
        return unknown or self.outbox_mark_sent(unique, attempted, now)

    def _delete_sent_before(self, cutoff: float) -> tuple[int, int]:
        row = self.one(q.DELETE_SENT, (cutoff,))
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # --- inbox -----------------------------------------------------------------------------

    def inbox_claim_arriving(
        self, rows: Sequence[Params], count: int, ahead: Mapping[str, int]
    ) -> tuple[int, dict[str, int], list[Outcome]]:
        """``InboxQueries.inbox_claim_arriving`` in one statement (``q.claim_arriving_sql``)
        for its first ``MANY`` rows; the rest, numbered by then, are claimed as always."""
        if not rows:
            before, owed = self.inbox_reserve_arrivals(count, ahead)
            return before, owed, []
        counts = {ARRIVAL: count, **ahead}  # the arrival row first: the lock order
        head = rows[:MANY]
        params = [*itertools.chain.from_iterable(counts.items()), count]
        params.extend(itertools.chain.from_iterable(head))
        found = self.execute(q.claim_arriving_sql(len(counts), len(head)), params)
        before = next(int(taken) for taken, *_ in found if taken is not None)
        claimed = {(name, source, key) for taken, name, source, key in found if taken is None}
        if len(rows) > MANY:
            claimed |= claim_inbox_rows(self, numbered_from(before, rows[MANY:]))
        return before, {}, outcomes_of_claim(self, INBOX, rows, claimed)

    # --- counters --------------------------------------------------------------------------

    def counter_bump_spread(self, name: str) -> None:
        # The row ``name#N`` is picked by the connection's server process, so concurrent
        # transactions (on other connections) mostly bump other rows.
        self.execute(q.BUMP_SPREAD, (name, q.COUNTER_SHARDS))

    # --- ledger ----------------------------------------------------------------------------

    def _ledger_lock_key(self, case_id: str, work_id: str) -> None:
        """Make everything that writes one key take turns from here to its commit. A request
        takes it BEFORE its claim, and the purge holds it when it looks at a key a last time
        and deletes it, so that each request counts the attempts committed before it (a key's
        attempt numbers are 1, 2, 3...), and a request and a purge of one key never interleave
        (the request's attempt never refers to a delivery the purge deleted).

        A request takes this one key lock only, so requests cannot wait on each other in a
        circle; a hash collision only makes two keys share a turn (and if hashes taken in key
        order still meet in a circle, PostgreSQL's deadlock check or KEY_LOCK_TIMEOUT ends one).
        """
        # "/" is in no key: no two keys join (the purge's IDLE_KEYS hashes the same text).
        self.execute(q.LOCK_KEY, (q.KEY_LOCK_CLASS, f"{case_id}/{work_id}", q.KEY_LOCK_TIMEOUT))

    def ledger_lock_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        for case_id, work_id in sorted(set(keys)):
            self._ledger_lock_key(case_id, work_id)

    def ledger_record(
        self, *, case_id: str, work_id: str, pod_uid: str, mode: str, fingerprint: str, now: float
    ) -> tuple[Outcome, int, int]:
        self._ledger_lock_key(case_id, work_id)
        if mode == "control":
            outcome = Outcome.APPLIED
            row = (case_id, work_id, fingerprint, pod_uid, now)
            delivery_no = int(self.scalar(INSERT_CONTROL, row))
        else:
            claim = claim_once(self, DELIVERIES, (case_id, work_id), fingerprint, (pod_uid, now))
            outcome, delivery_no = claim.outcome, int(claim.ref)
        self.execute(
            q.INSERT_ATTEMPT_ROW,
            (
                case_id, work_id, pod_uid, mode,
                None if outcome is Outcome.CONFLICT else delivery_no,
                outcome.value, fingerprint, now,
            ),
        )  # fmt: skip
        # Spread counters: every request bumps "attempts", and one row for it would make all
        # requests (all replicas) take turns until each one's commit.
        self.counter_bump_spread("ledger.attempts")
        self.counter_bump_spread(_OUTCOME_COUNTER[outcome])
        return outcome, delivery_no, int(self.scalar(q.COUNT_ATTEMPTS, (case_id, work_id)))

    def ledger_purge_idle_chunk(
        self, cutoff: float, after: tuple[str, str], limit: int = PURGE_CHUNK
    ) -> tuple[int, int, tuple[str, str] | None]:
        """Requests run while the purge does. Each key's lock (``_ledger_lock_key``) is TRIED,
        never waited for: a key whose lock a request holds is being asked for, so it is not
        idle and is kept (as is, until the next purge, an idle key that shares its lock's
        hash). A purge never waits for a request, so it can hold many key locks, taken in any
        order, without a deadlock; a request for a key of the chunk waits at most for the
        chunk's commit."""
        found = self.execute(q.IDLE_KEYS, (*after, cutoff, limit, q.KEY_LOCK_CLASS))
        if not found:
            return 0, 0, None
        last = (str(found[-1][0]), str(found[-1][1]))
        held = [(str(case_id), str(work_id)) for case_id, work_id, locked in found if locked]
        if not held:
            return 0, 0, last
        gone_attempts = self.execute(
            q.DELETE_HELD_IDLE, ([key[0] for key in held], [key[1] for key in held], cutoff)
        )
        numbers = sorted({int(row[0]) for row in gone_attempts if row[0] is not None})
        gone_deliveries = self.execute(q.DELETE_DELIVERIES, (numbers,))
        return len(gone_deliveries), len(gone_attempts), last

    # --- partition leases ------------------------------------------------------------------

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
        # One statement for a whole acknowledged batch: one lease check, one renewal, one
        # round trip (a statement per event took half the partition relay's time). It marks
        # all of them or none, so it needs no transaction around it (``statements``).
        ids = list(dict.fromkeys(event_ids))
        params = (ids, key, ttl, key, owner, token, now, bump, bump, now)
        return len(self.execute(self._lease_sql(q.MARK_UNDER_LEASE), params))

    def lease_ensure_partition_index(self) -> bool:
        return False  # kept from the first migration on
