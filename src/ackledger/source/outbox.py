"""The source side: a transactional outbox.

A business write and the event that announces it commit in one transaction, so an event
exists exactly when its business change does. ``pending`` is a pure read in acceptance order;
only an exact acknowledgement (see ``ackledger.dispatch``) turns an event into ``sent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .. import plugins
from .._core.duration import MAX_SECONDS
from .._core.exact import is_int, is_number
from .._core.idempotency import Outcome
from .._core.printable import breaks_line, has_control
from .._core.telemetry import with_trace_context
from ..envelope import check_event_id, fingerprint_of, validate_cloudevent, validate_encoded
from ..errors import Conflict, InvalidEvent
from ..event_types import EventTypes
from ..store import Tx
from ..store.borrowed import BorrowedOutbox
from ..store.database import Database
from ..store.outbox import MARK_CHUNK, SOURCE_KEY, STATUS_ACK_NOTE, TARGET_KEY
from ..store.pending import PendingRow, pending_events
from ..wire.sender import shown

MAX_BATCH = 16
#: The most events one ``pending_listing`` returns.
MAX_LISTING = 1000


def check_limit(limit: object) -> int:
    if not is_int(limit):
        raise ValueError(f"limit: must be an int from 1 to {MAX_BATCH}, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_BATCH:
        raise ValueError(f"limit: must be from 1 to {MAX_BATCH}, got {limit}")
    return limit


#: A business write that comes with a new event (``write(tx, now)``, in its transaction): run
#: only when the event is new, it raises (Conflict, ...) to refuse it, rolling both back.
BusinessWrite = Callable[[Tx, float], None]


def _publish(
    tx: Tx,
    given: object,
    default_source: str,
    types: EventTypes,
    business: BusinessWrite | None = None,
    *,
    borrowed: BorrowedOutbox | None = None,
) -> int:
    """Validate ``given`` (``specversion`` and ``source`` filled in if missing) and claim its
    id in the outbox, running ``business`` too when the event is new; returns its seq. On a
    caller's transaction, ``borrowed`` says where the outbox's tables are."""
    if type(given) is dict:
        # The active span's context, unless the event names its own (CONTRACT §10).
        given = with_trace_context(given)
    if isinstance(given, Mapping) and not ("source" in given and "specversion" in given):
        given = {"specversion": "1.0", "source": default_source, **given}
    event, text = validate_encoded(given, types=types)
    if "seq" in event:
        # CONTRACT section 3: pending() adds the row's number to each event under this name,
        # and the copy a sender gets leaves it out, so an extension of that name would be lost.
        raise InvalidEvent(
            "seq: reserved by the outbox for each pending event's row number; "
            "name the extension otherwise",
            field="seq",
        )
    fp = fingerprint_of(event, text)
    partition_key = event.get("partitionkey", SHARED_PARTITION)
    now = time.time()
    enqueue = tx.outbox_enqueue if borrowed is None else borrowed.enqueue
    claim = enqueue(event, text, fp, partition_key, now)
    if claim is None:  # pragma: no cover - only a claim given a place can come back without one
        raise RuntimeError("the outbox's tables moved while its event was claimed")
    outcome = claim.outcome
    if outcome is Outcome.CONFLICT:
        legacy = plugins.former_fingerprint(event)
        if legacy is None or legacy != tx.outbox_fingerprint(event["id"]):
            raise Conflict(f"event {event['id']!r} is already in the outbox with other content")
        outcome = Outcome.DUPLICATE
    if outcome is Outcome.APPLIED and business is not None:
        business(tx, now)
    return int(claim.ref)


#: The lease key of the events that name no ``partitionkey``: one shared partition (an
#: attribute is 1-256 characters, so it can never be this).
SHARED_PARTITION = ""


REORDER_IDS_KEPT = 1000  # the reorder record names this many overtaking ids, then a seq range


def _check_event_id(event_id: object) -> str:
    return check_event_id(event_id, "event_id")


MAX_REASON = 2000


def _check_reason(reason: object) -> str:
    # InvalidEvent (a ValueError) names the bad input apart from a state refusal (ValueError).
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidEvent("reason: must be a non-empty string saying why", field="reason")
    if len(reason) > MAX_REASON:
        raise InvalidEvent(
            f"reason: must be at most {MAX_REASON} characters, got {len(reason)}", field="reason"
        )
    if has_control(reason):
        # It is printed back by `quarantined` and `trace`: a newline or an escape sequence
        # would forge lines or drive the operator's terminal.
        raise InvalidEvent(
            "reason: must be one line of text without control characters (newline, tab, escape)",
            field="reason",
        )
    return reason.strip()


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """Text we do not control (a sink's answer, an exception's message) made storable and
    printable: what ``breaks_line`` refuses becomes a space, and it is cut to ``limit``."""
    line = "".join(" " if breaks_line(ch) else ch for ch in text).strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def reason_from(text: str) -> str:
    """A quarantine reason made from text we do not control."""
    return one_line(text) or "no reason given"


def _not_in_state(tx: Tx, event_id: str, wanted: str, verb: str) -> Exception:
    """The error for an operation on an event that is not in the state it needs."""
    status = tx.outbox_status(event_id)
    if status is None:
        return KeyError(event_id)
    _, sent, quarantined, _ = status
    now = "sent" if sent else "quarantined" if quarantined else "pending"
    return ValueError(f"event {event_id!r} is {now}, not {wanted}; it cannot be {verb}")


class OutboxTransaction:
    """The user's side of ``Outbox.transaction()``: business writes plus ``publish``."""

    def __init__(self, tx: Tx, outbox: Outbox) -> None:
        self._tx = tx
        self._outbox = outbox

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the user's own SQL (``?`` placeholders on every backend); returns its rows."""
        return self._tx.execute(statement, params)

    def publish(self, event: object) -> int:
        """Add ``event`` to the outbox in this transaction; returns its seq."""
        return _publish(self._tx, event, self._outbox.source, self._outbox.types, None)

    enqueue = publish  #: v1's name


def _check_source(value: object) -> str:
    """``value`` if it is a CloudEvents source (InvalidEvent naming ``source`` if not)."""
    probe = {"specversion": "1.0", "id": "x", "type": "x", "source": value}
    return str(validate_cloudevent(probe)["source"])


class Outbox(Database):
    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        source: str | None = None,
        types: EventTypes | None = None,
        synchronous: str = "FULL",
        schema: str | None = None,
    ) -> None:
        if source is not None:
            source = _check_source(source)
        if types is not None and not isinstance(types, EventTypes):
            raise TypeError(f"types: must be an EventTypes, got {type(types).__name__}")
        self.types = types if types is not None else EventTypes()
        super().__init__(target, synchronous=synchronous, schema=schema)
        try:
            self.source = self._stored_source(source)
        except BaseException:
            self.close()
            raise

    def _stored_source(self, wanted: str | None) -> str:
        """The outbox's source: stored once, when it is first opened as an outbox."""
        with self._db.read() as tx:
            stored = tx.meta_get(SOURCE_KEY)
        if stored is None:
            made = wanted if wanted is not None else f"urn:ackledger:{uuid.uuid4()}"
            with self._db.write() as tx:
                stored = tx.meta_set_once(SOURCE_KEY, made)
        if wanted is not None and wanted != stored:
            raise ValueError(
                f"source: this outbox's source is {stored!r}, not {wanted!r} "
                "(it is stored with the outbox and never changes: its events' identity)"
            )
        return stored

    def publish(self, event: object, *, using: object = None) -> int:
        """Validate ``event`` and add it to the outbox; returns its seq. Without ``using``, in
        a transaction of its own; with ``using``, on the caller's connection, inside the
        caller's transaction, which ackledger never commits or rolls back."""
        if using is None:
            with self._db.write() as tx:
                return _publish(tx, event, self.source, self.types, None)
        return self._publish_borrowed(self._db.borrow(using), event)

    async def publish_async(self, event: object, *, using: object = None) -> int:
        """``publish`` for asyncio code; returns the event's seq. With ``using`` (a SQLAlchemy
        ``AsyncSession`` or ``AsyncConnection``, a psycopg ``AsyncConnection`` or an asyncpg
        ``Connection``) on the caller's connection, inside the caller's transaction, by the
        same rules and the same statements as ``publish(using=)`` (store/borrowed_async.py
        says how); without it, ackledger's own transaction in a worker thread. Either way the
        event loop runs on while the database works."""
        if using is None:
            return await asyncio.to_thread(self.publish, event)
        return await self._db.run_borrowed(using, lambda tx, _: self._publish_borrowed(tx, event))

    def _publish_borrowed(self, tx: Tx, event: object) -> int:
        """The publish of ``event`` on a transaction borrowed from the caller."""
        return _publish(
            tx, event, self.source, self.types, borrowed=BorrowedOutbox(tx, self.source)
        )

    def accept(self, order: object) -> int:
        """The reference domain (CONTRACT section 3): the order's event and its business row
        in one transaction, both made by the plug-in that registers ``accept``; returns the
        outbox seq. The lab's tables are made by its first call, never by opening."""
        event, write = plugins.call("accept")(order, self.source)
        self._db.ensure_plugin(event["type"])
        with self._db.write() as tx:
            return _publish(tx, event, self.source, self.types, write)

    @contextmanager
    def transaction(self) -> Iterator[OutboxTransaction]:
        with self._db.write() as tx:
            yield OutboxTransaction(tx, self)

    def pending(self, limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        """Unsent, unquarantined events in acceptance (seq) order. Writes nothing."""
        return self.pending_beyond((), limit)

    def pending_listing(self, limit: int = MAX_BATCH) -> tuple[list[dict[str, Any]], int]:
        """``(the first limit pending events, how many are pending)`` from one read, for a
        listing that says how many it leaves out (``ackledger pending``); ``limit`` may be up to
        ``MAX_LISTING``, as a listing is read, not sent. Writes nothing."""
        if not is_int(limit):
            raise ValueError(f"limit: must be an int from 1 to {MAX_LISTING}, got {limit!r}")
        if not 1 <= limit <= MAX_LISTING:
            raise ValueError(f"limit: must be from 1 to {MAX_LISTING}, got {limit}")
        with self._db.read() as tx:
            rows = tx.outbox_pending(limit)
            total, _ = tx.outbox_pending_summary()
        return pending_events(rows), total

    def pending_beyond(self, skip: Collection[str], limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        """``pending(limit)`` without the events in ``skip`` (those whose marks are still being
        committed on another connection: ``MarksBehind``). Writes nothing."""
        return pending_events(self.pending_rows(skip, limit))

    def pending_rows(self, skip: Collection[str], limit: int = MAX_BATCH) -> list[PendingRow]:
        """``pending_beyond`` as the rows read, each parsed only when asked (``dispatch_batch``:
        store/pending.py). Writes nothing."""
        check_limit(limit)
        # One statement is its own snapshot: on PostgreSQL one round trip instead of a
        # BEGIN, the SELECT and a COMMIT for every batch.
        with self._db.lookup() as tx:
            rows = tx.outbox_pending(limit + len(skip))
        if not skip:
            return rows
        return [row for row in rows if row.id not in skip][:limit]

    def mark_sent(self, event_id: str, *, attempted: bool = False, durable: bool = True) -> None:
        """Set ``sent = 1``; idempotent. ``attempted`` also counts the send that earned it.
        ``durable=False``: see ``Backend.write`` (dispatch's ``mark_sync="last"``)."""
        if not durable or not isinstance(event_id, str):  # mark_sent_many relaxes, or refuses
            self.mark_sent_many([event_id], attempted=attempted, durable=durable)
            return
        # The per-item relay's mark, once per event: its one statement, a transaction by itself
        # (``Backend.statement``; ``mark_sent_many`` of one id does the same, in more steps).
        with self._db.statement() as tx:
            if not tx.outbox_mark_one(event_id, attempted, time.time()):
                raise KeyError(event_id)

    def mark_sent_many(
        self, event_ids: Sequence[str], *, attempted: bool = False, durable: bool = True
    ) -> None:
        """Mark several events sent in one transaction (all or none)."""
        ids = list(event_ids)
        for event_id in ids:
            if not isinstance(event_id, str):
                raise TypeError(f"event_id: must be a string, got {type(event_id).__name__}")
        now = time.time()
        if durable and len(ids) <= MARK_CHUNK:
            # All or none in one statement: on PostgreSQL one round trip without a BEGIN and a
            # COMMIT around it (on SQLite, statements are a write transaction as well).
            with self._db.statements() as tx:
                unknown = tx.outbox_mark_sent_whole(ids, attempted, now)
                if unknown:
                    raise KeyError(unknown[0])
            return
        with self._db.write(durable=durable) as tx:
            unknown = tx.outbox_mark_sent(ids, attempted, now)
            if unknown:
                raise KeyError(unknown[0])

    def record_failure(self, event_id: str, error: str) -> None:
        """Count a failed send attempt and keep its error for the operator."""
        with self._db.write() as tx:
            tx.outbox_record_failure(event_id, one_line(error), time.time())

    def amend_error(self, event_id: str, error: str) -> None:
        """Give the last recorded failure a better account (e.g. the sink's own words for a
        refused batch item); the attempt was already counted by ``record_failure``."""
        with self._db.write() as tx:
            tx.outbox_amend_error(event_id, one_line(error))

    def event(self, event_id: str) -> dict[str, Any] | None:
        """Everything the outbox knows of one event, or None."""
        with self._db.read() as tx:
            return tx.outbox_event(event_id)

    def held_by_lease(self, event_id: str) -> dict[str, Any] | None:
        """The live lease on this event's partition (``partition``, ``owner``, ``until``):
        only its holder sends the partition's events until then. None when there is none."""
        with self._db.read() as tx:
            return tx.lease_holding(event_id)

    def held_by_leases(self) -> list[dict[str, Any]]:
        """Every live lease over pending events: ``partition``, ``owner``, ``until`` and how
        many events it holds (``pending``). A killed holder's lease shows here until it ends."""
        with self._db.read() as tx:
            return tx.lease_held()

    def order(self, event_id: str) -> dict[str, Any] | None:
        """The reference domain's order of this id, or None: the plug-in that registers
        ``order`` reads it, from its own tables (writing nothing)."""
        found: dict[str, Any] | None = plugins.call("order")(self._db, event_id)
        return found

    # --- operations: quarantine, requeue, statistics, retention ---------------------------

    def quarantine(self, event_id: str, reason: str) -> int:
        """Take a pending event out of ``pending`` with the reason why; returns its seq.

        Quarantine is never success: the event is not sent, is not counted as sent, and stays
        in the outbox until ``requeue`` puts it back. Unknown id: KeyError; an event that is
        not pending (sent, or already quarantined): ValueError.
        """
        event_id = _check_event_id(event_id)
        reason = _check_reason(reason)
        now = time.time()
        with self._db.write() as tx:
            seq = tx.outbox_quarantine(event_id, reason, now)
            if seq is None:
                raise _not_in_state(tx, event_id, "pending", "quarantined")
            tx.outbox_log_append(event_id, "quarantined", json.dumps({"reason": reason}), now)
        return int(seq)

    def requeue(self, event_id: str) -> dict[str, Any]:
        """Put a quarantined event back into ``pending`` at its original seq.

        Events after it (higher seq) that were delivered while it was out have overtaken it:
        that reorder is the operator's doing, and it is recorded in the outbox log and returned
        as ``{"id", "seq", "quarantined_at", "overtaken_by": [ids], "overtaken_count"}``.
        """
        event_id = _check_event_id(event_id)
        now = time.time()
        with self._db.write() as tx:
            status = tx.outbox_status(event_id)
            if status is None or status[1] or not status[2]:
                raise _not_in_state(tx, event_id, "quarantined", "requeued")
            seq, _, _, quarantined_at = status
            # A row quarantined without a time (hand-edited) counts as out since the start.
            quarantined_at = 0.0 if quarantined_at is None else quarantined_at
            ahead = tx.outbox_sent_after(seq, quarantined_at)
            if tx.outbox_requeue(event_id) is None:
                raise _not_in_state(tx, event_id, "quarantined", "requeued")
            record: dict[str, Any] = {
                "id": event_id,
                "seq": seq,
                "quarantined_at": quarantined_at,
                "overtaken_count": len(ahead),
                "overtaken_by": [ahead_id for _, ahead_id in ahead[:REORDER_IDS_KEPT]],
            }
            if len(ahead) > REORDER_IDS_KEPT:
                record["overtaken_seq_range"] = [ahead[0][0], ahead[-1][0]]
            tx.outbox_log_append(event_id, "requeued", json.dumps(record), now)
        return record

    def quarantined(self) -> list[dict[str, Any]]:
        """Quarantined events in seq order, each with ``reason`` and ``quarantined_at``."""
        with self._db.read() as tx:
            rows = tx.outbox_quarantined()
        for row in rows:
            row["reason"] = row.pop("quarantine_reason")
        return rows

    def history(self, event_id: str) -> list[dict[str, Any]]:
        """What operations did to one event (quarantined, requeued ...), oldest first."""
        with self._db.read() as tx:
            rows = tx.outbox_log(event_id)
        for row in rows:
            row["detail"] = json.loads(row["detail"])
        return rows

    def record_target(self, url: str, *, ack: str = "exact") -> None:
        """Note that a relay (or ``ackledger dispatch``) starts sending this outbox to ``url``
        now, so ``trace`` can say which kind of ACK a later mark stands for. One small write
        per start, none per event; ``url`` is stored as it may be printed (no password), with
        ``ack="status"`` (any 2xx) noted after it: a URL never holds a space."""
        if ack not in ("exact", "status"):
            raise ValueError(f"ack: must be 'exact' or 'status', got {ack!r}")
        name = TARGET_KEY + shown(url) + (STATUS_ACK_NOTE if ack == "status" else "")
        with self._db.write() as tx:
            tx.meta_set(name, repr(time.time()))

    def targets(self) -> list[dict[str, Any]]:
        """The targets relays have sent this outbox to, each with its ACK rule (``ack``:
        ``exact`` or ``status``) and the time of its latest start (``started_at``), oldest
        start first."""
        with self._db.read() as tx:
            rows = tx.meta_under(TARGET_KEY)
        found = []
        for name, value in rows:
            target = name[len(TARGET_KEY) :]
            ack = "status" if target.endswith(STATUS_ACK_NOTE) else "exact"
            target = target.removesuffix(STATUS_ACK_NOTE)
            found.append({"target": target, "ack": ack, "started_at": float(value)})
        return sorted(found, key=lambda target: target["started_at"])

    def stats(self) -> dict[str, Any]:
        """What an operator watches.

        ``pending`` (sendable now) and ``quarantined`` are current states; ``sent`` and
        ``attempts`` (every send attempt with an outcome, by dispatch or the relay) count over
        the database's life, purged rows included; ``last_error`` is the latest error of an
        event that is still not sent, or None.
        """
        with self._db.read() as tx:
            pending, oldest = tx.outbox_pending_summary()
            sent, quarantined, attempts = tx.outbox_totals()
            purged_sent, purged_attempts = tx.outbox_purged_totals()
            last_error = tx.outbox_last_unsent_error()
        return {
            "pending": pending,
            "oldest_pending_age_s": 0.0 if oldest is None else max(0.0, time.time() - oldest),
            "attempts": attempts + purged_attempts,
            "sent": sent + purged_sent,
            "quarantined": quarantined,
            "purged": purged_sent,
            "last_error": last_error,
        }

    def purge(self, older_than_seconds: float) -> int:
        """Delete sent rows sent more than ``older_than_seconds`` ago; returns how many.

        Pending and quarantined rows are never deleted. A purged id is forgotten by the
        outbox (accepting it again would enqueue it anew); the sink's inbox still applies it
        only once.
        """
        if not is_number(older_than_seconds):
            raise ValueError("older_than_seconds: must be a number of seconds")
        if not 0 <= older_than_seconds <= MAX_SECONDS:  # also refuses nan
            raise ValueError(
                f"older_than_seconds: must be from 0 to {MAX_SECONDS:.0f}, "
                f"got {older_than_seconds!r}"
            )
        with self._db.write() as tx:
            return tx.outbox_purge_sent(time.time() - older_than_seconds)
