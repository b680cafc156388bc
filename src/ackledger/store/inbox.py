"""The sink's inbox: receipts, their claims, arrival numbers and retention."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .._core.idempotency import Outcome
from .claims import claim_all
from .counters import CounterQueries, bump_returning_statement
from .executor import Params
from .keys import INBOX

RECEIPT_COLUMNS = (
    "source", "id", "type", "fingerprint", "first_received_at", "last_received_at", "receipts",
)  # fmt: skip


#: The durable count of receipts that retention deleted (``Inbox.purge``, any process).
PURGED = "sink.purged"

#: Where a purge before every key starts its walk (ids and sources are never empty).
BEFORE_ALL = ("", "")

# The purge walks the inbox's key, (id, source), a window of keys at a time: the first
# statement finds the window's last key, the second what the window holds (the oldest receipt
# it keeps, how many it would delete), both without writing, so the purge takes the write
# lock only to delete (sink/retention.py). Each reads at most one window of the key's B-tree,
# whatever the table's size: there is no index on the time of first arrival (migration 0010
# dropped it).
_WINDOW_END = (
    "SELECT id, source FROM ackledger_inbox WHERE name = ? AND (id, source) > (?, ?) "
    "ORDER BY id, source LIMIT 1 OFFSET ?"
)
# Every window statement is of one inbox's receipts: the name is its first parameter.
_IN_WINDOW = "name = ? AND (id, source) > (?, ?)"
_TO_WINDOW_END = " AND (id, source) <= (?, ?)"
_WINDOW_HOLDS = (
    "SELECT MIN(CASE WHEN first_received_at >= ? THEN first_received_at END), "
    "COUNT(CASE WHEN first_received_at < ? THEN 1 END) FROM ackledger_inbox WHERE "
)
# Counted from what this DELETE removed, so two purges at once never count a receipt twice;
# a receipt that arrived in the window since it was read is newer than the cutoff and stays.
_WINDOW_DELETE = "DELETE FROM ackledger_inbox WHERE first_received_at < ? AND "

# A purge records the oldest receipt it kept unless one with a later cutoff already did: of two
# purges at once, the later cutoff's walk saw what both kept (store/migrations/*/0010).
_RECORD_OLDEST = (
    "INSERT INTO ackledger_inbox_oldest (name, first_received_at, cutoff, generation) "
    "VALUES (?, ?, ?, 1) ON CONFLICT (name) DO UPDATE SET "
    "first_received_at = excluded.first_received_at, cutoff = excluded.cutoff, "
    "generation = ackledger_inbox_oldest.generation + 1 "
    "WHERE ackledger_inbox_oldest.cutoff IS NULL OR ackledger_inbox_oldest.cutoff <= "
    "excluded.cutoff"
)


class PurgeWindow(NamedTuple):
    """What one window of a purge's walk holds."""

    #: The window's last key, where the next window starts; None: it ran to the table's end.
    last: tuple[str, str] | None
    #: The oldest first arrival among the receipts the purge keeps here (None: none).
    kept_oldest: float | None
    #: How many receipts older than the cutoff it held when read (the DELETE counts).
    old: int


class RecordedOldest(NamedTuple):
    """The ``inbox_oldest`` row: what the last purge recorded."""

    first_received_at: float | None
    generation: int


def _window_range(
    name: str, after: tuple[str, str], last: tuple[str, str] | None
) -> tuple[str, Params]:
    if last is None:
        return _IN_WINDOW, (name, *after)
    return _IN_WINDOW + _TO_WINDOW_END, (name, *after, *last)


#: The read by key before a lone event (the sink's ``Inbox``): its stored fingerprint.
INBOX_FINGERPRINT = (
    "SELECT fingerprint FROM ackledger_inbox WHERE name = ? AND source = ? AND id = ?"
)

# Folding a group's outcome counts into this upsert was tried and dropped: a two-row upsert
# with RETURNING costs SQLite more than this one and a plain upsert after it (5.8 against
# 3.1 + 1.3 us), RETURNING being most of a row's cost.
#: The counter the sink's arrival numbers are taken from.
ARRIVAL = "sink.arrival"
_RESERVE = (
    "INSERT INTO ackledger_counters (name, value) VALUES ('sink.arrival', ?) "
    "ON CONFLICT (name) DO UPDATE SET value = ackledger_counters.value + excluded.value "
    "RETURNING value"
)


def numbered_from(before: int, rows: Sequence[Params]) -> list[tuple[Any, ...]]:
    """Claim rows whose arrival numbers (their last two values) count from a block's start,
    numbered from ``before``, the number before the block."""
    return [(*row[:7], before + row[7], before + row[8]) for row in rows]


class InboxQueries(CounterQueries):
    def inbox_claim_all(self, rows: Sequence[Params]) -> list[Outcome]:
        """``inbox_claim`` of many distinct identities, in one multi-row INSERT per 64; each
        row is (name, source, id, fingerprint, type, now, now, arrival, arrival). See
        ``claims.claim_all``."""
        return claim_all(self, INBOX, rows)

    def inbox_fingerprint(self, name: str, source: str, event_id: str) -> str | None:
        found = self.scalar(INBOX_FINGERPRINT, (name, source, event_id))
        return None if found is None else str(found)

    def inbox_reserve_arrivals(
        self, count: int, ahead: Mapping[str, int] | None = None
    ) -> tuple[int, dict[str, int]]:
        """Take ``count`` numbers of the sink's arrival sequence; returns the one before the
        first, and the counts the caller's ``counters_bump`` in this same transaction must
        add (none here: this statement took them; SQLite's reads the counter and leaves the
        bump to that statement, ``sqlite.tx``). The counter row stays locked until the
        transaction ends, so the numbers follow commit order on every backend.

        ``ahead``: counts the caller adds now, before it knows its outcomes, and corrects by
        its last bump; here they ride the same statement, one round trip for both."""
        if not ahead:
            return int(self.scalar(_RESERVE, (count,))) - count, {}
        # The arrival row first: every transaction locks the counters in the same order.
        rows = self.execute(*bump_returning_statement({ARRIVAL: count, **ahead}))
        taken = next(int(value) for name, value in rows if name == ARRIVAL)
        return taken - count, {}

    def inbox_claim_arriving(
        self, rows: Sequence[Params], count: int, ahead: Mapping[str, int]
    ) -> tuple[int, dict[str, int], list[Outcome]]:
        """``inbox_reserve_arrivals(count, ahead)`` then ``inbox_claim_all`` of ``rows``, whose
        arrival numbers (their last two values) count from the block's start, 1 its first;
        returns the reservation's two values and the claim's outcomes. The counter row is
        locked before any receipt, as by the two calls. Here two statements; PostgreSQL's is
        one (``postgres.tx``): a round trip fewer for every transaction of the sink."""
        before, owed = self.inbox_reserve_arrivals(count, ahead)
        return before, owed, self.inbox_claim_all(numbered_from(before, rows))

    def inbox_note_receipts(
        self, name: str, identities: Sequence[tuple[str, str]], now: float
    ) -> dict[str, int]:
        """``inbox_note_receipt`` of events that were all already there, each with the next
        arrival number in turn; returns what the caller's ``counters_bump`` owes, as
        ``inbox_reserve_arrivals``."""
        arrival, owed = self.inbox_reserve_arrivals(len(identities))
        for source, event_id in identities:
            arrival += 1
            self.inbox_note_receipt(name, source, event_id, now, arrival)
        return owed

    def inbox_note_lone(
        self, name: str, source: str, event_id: str, now: float, counted: str
    ) -> None:
        """A lone re-send's whole note: ``inbox_note_receipts`` of its one identity, then
        its ``counted`` and arrival counts in one bump, as the sink's general way writes
        them."""
        owed = self.inbox_note_receipts(name, ((source, event_id),), now)
        self.counters_bump({**owed, counted: 1})

    def inbox_unclaim(self, name: str, identities: Sequence[tuple[str, str]]) -> None:
        """Delete receipts this transaction claimed and gives back (a run stopped before
        their events): as if never claimed, for this transaction and for any other."""
        self.executemany(
            "DELETE FROM ackledger_inbox WHERE name = ? AND source = ? AND id = ?",
            [(name, *identity) for identity in identities],
        )

    def inbox_note_receipt(
        self, name: str, source: str, event_id: str, now: float, arrival: int
    ) -> None:
        """Count another arrival of an event that was already there (a duplicate)."""
        self.execute(
            "UPDATE ackledger_inbox SET receipts = receipts + 1, last_received_at = ?, "
            "last_arrival = ? "
            "WHERE name = ? AND source = ? AND id = ?",
            (now, arrival, name, source, event_id),
        )

    def inbox_receipts(
        self, name: str, event_id: str, source: str | None = None
    ) -> list[dict[str, Any]]:
        """The inbox ``name``'s receipts of events with this id (of this source, if given),
        oldest first."""
        columns = ", ".join(RECEIPT_COLUMNS)
        if source is None:
            rows = self.execute(
                f"SELECT {columns} FROM ackledger_inbox WHERE id = ? AND name = ? ORDER BY "
                f"first_received_at, source",
                (event_id, name),
            )
        else:
            rows = self.execute(
                f"SELECT {columns} FROM ackledger_inbox WHERE name = ? AND source = ? AND id = ?",
                (name, source, event_id),
            )
        return [dict(zip(RECEIPT_COLUMNS, row, strict=True)) for row in rows]

    def inbox_purge_window(
        self, name: str, after: tuple[str, str], size: int, cutoff: float
    ) -> PurgeWindow:
        """Read the window of up to ``size`` keys of the inbox ``name`` after ``after``
        (``BEFORE_ALL`` first)."""
        found = self.one(_WINDOW_END, (name, *after, size - 1))
        last = None if found is None else (str(found[0]), str(found[1]))
        where, keys = _window_range(name, after, last)
        row = self.one(_WINDOW_HOLDS + where, (cutoff, cutoff, *keys))
        kept, old = (None, 0) if row is None else row
        return PurgeWindow(last, None if kept is None else float(kept), int(old))

    def inbox_purge_delete(
        self, name: str, after: tuple[str, str], last: tuple[str, str] | None, cutoff: float
    ) -> int:
        """Delete the inbox ``name``'s receipts after the key ``after`` up to ``last`` (None:
        to the table's end) first received before ``cutoff``, and add them to the durable
        ``PURGED`` counter; returns how many."""
        where, keys = _window_range(name, after, last)
        gone = len(self.execute(_WINDOW_DELETE + where + " RETURNING 1", (cutoff, *keys)))
        if gone:
            self.counter_bump(PURGED, gone)
        return gone

    def inbox_record_oldest(self, name: str, oldest: float | None, cutoff: float) -> None:
        """Record the oldest receipt of the inbox ``name`` a purge with this ``cutoff`` kept
        (None: it kept none)."""
        self.execute(_RECORD_OLDEST, (name, oldest, cutoff))

    def inbox_recorded_oldest(self, name: str) -> RecordedOldest | None:
        """What the last purge of the inbox ``name`` recorded (None: it was never purged)."""
        row = self.one(
            "SELECT first_received_at, generation FROM ackledger_inbox_oldest WHERE name = ?",
            (name,),
        )
        if row is None:
            return None
        return RecordedOldest(None if row[0] is None else float(row[0]), int(row[1]))

    def inbox_scan_oldest(self, name: str) -> float | None:
        """The oldest receipt's first arrival by a scan of the inbox ``name`` (no index has
        that order): for when nothing is recorded. None for an empty inbox."""
        found = self.scalar(
            "SELECT MIN(first_received_at) FROM ackledger_inbox WHERE name = ?", (name,)
        )
        return None if found is None else float(found)

    # A handler runs inside a savepoint: its failure then undoes its writes, and nothing
    # else of the transaction.
    def handler_savepoint(self) -> None:
        self.execute("SAVEPOINT ackledger_handler")

    def handler_release(self) -> None:
        self.execute("RELEASE SAVEPOINT ackledger_handler")

    def handler_undo(self) -> None:
        self.execute("ROLLBACK TO SAVEPOINT ackledger_handler")
        self.execute("RELEASE SAVEPOINT ackledger_handler")
