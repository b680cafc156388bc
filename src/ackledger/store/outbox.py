"""The source's outbox, its operations log and its retention."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._core.idempotency import Claim
from ..envelope import canonical_json
from .counters import CounterQueries
from .pending import PENDING_SELECT, PendingRow, pending_rows

EVENT_COLUMNS = (
    "seq", "id", "source", "type", "subject", "partitionkey", "partition_key", "fingerprint",
    "event", "sent",
    "quarantined", "quarantine_reason", "quarantined_at", "created_at", "sent_at", "attempts",
    "last_error", "last_attempt_at",
)  # fmt: skip
QUARANTINED_COLUMNS = (
    "seq", "id", "source", "type", "quarantine_reason", "quarantined_at", "attempts",
    "last_error",
)  # fmt: skip
SOURCE_KEY = "outbox.source"
#: ackledger_meta names under which relays note their targets: "relay.target:<url>".
TARGET_KEY = "relay.target:"
#: After a target's URL: its relay took any 2xx as the ACK (``ack="status"``).
STATUS_ACK_NOTE = " ack=status"
LOG_COLUMNS = ("seq", "event_id", "kind", "detail", "at")
PURGED_SENT = "outbox.purged_sent"
PURGED_ATTEMPTS = "outbox.purged_attempts"

#: Ids per UPDATE in ``outbox_mark_sent``: far below every backend's limit on bound parameters.
MARK_CHUNK = 256

# A mark that arrives for an event an operator quarantined while its send was in flight
# counts the attempt but leaves the event quarantined and unsent: the hold holds (it is not
# counted as sent, stays listed, can be requeued, is never purged), and a requeue re-sends it
# as a duplicate that the inbox absorbs. The partition marks (leases) use it too.
SENT_UNLESS_HELD = (
    "sent = CASE WHEN quarantined = 0 THEN 1 ELSE sent END, "
    "sent_at = CASE WHEN quarantined = 0 THEN COALESCE(sent_at, ?) ELSE sent_at END"
)

#: The mark and the attempt it counts, in one statement (``outbox_mark_sent``).
_MARK_SET = (
    f"UPDATE ackledger_outbox SET {SENT_UNLESS_HELD}, "
    "attempts = attempts + ?, last_attempt_at = CASE WHEN ? = 1 THEN ? ELSE last_attempt_at END "
)
#: The mark of one id; its parameters are ``mark_one_params``. A dialect that can read how
#: many rows a statement changed runs it as it is (SQLite: no RETURNING, which costs a
#: table of its own per statement); ``outbox_mark_one`` asks for the id back.
MARK_ONE = _MARK_SET + "WHERE id = ?"
_MARK_ONE = MARK_ONE + " RETURNING id"

#: Sent rows old enough to purge; matches the partial index outbox_sent_at.
SENT_BEFORE = "WHERE sent = 1 AND sent_at < ?"


@dataclass(frozen=True)
class Place:
    """Where ackledger's unqualified table names resolve on a connection: the objects that
    ``ackledger_meta`` and ``ackledger_outbox`` name there (the dialect's own identities),
    and the outbox's schema as SQL may name it."""

    meta: Any
    outbox: Any
    schema: str


class OutboxQueries(CounterQueries):
    @abc.abstractmethod
    def outbox_place(self) -> Place | None:
        """Where ackledger's tables are on this connection now (None for a missing
        ``ackledger_meta``; ``Place.outbox`` None for a missing outbox), by a read that
        cannot fail: a failed statement would abort a caller's PostgreSQL transaction."""

    @abc.abstractmethod
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
        """Claim the id of a validated ``event`` whose canonical JSON is ``text``
        (``keys.OUTBOX``; the reference is its seq), so that enqueues into one partition
        commit in seq order, and tell idle relays of a new event once this transaction
        commits (where the database can).

        With ``place`` (an earlier ``outbox_place``): only while ackledger's names still
        resolve there; None, with nothing written, when they do not."""

    def outbox_fingerprint(self, event_id: str) -> str | None:
        found = self.scalar("SELECT fingerprint FROM ackledger_outbox WHERE id = ?", (event_id,))
        return None if found is None else str(found)

    def meta_get(self, name: str) -> str | None:
        found = self.scalar("SELECT value FROM ackledger_meta WHERE name = ?", (name,))
        return None if found is None else str(found)

    def meta_set_once(self, name: str, value: str) -> str:
        """Store ``value`` under ``name`` unless a value is there; returns the stored one."""
        self.execute(
            "INSERT INTO ackledger_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, value),
        )
        return str(self.scalar("SELECT value FROM ackledger_meta WHERE name = ?", (name,)))

    def meta_set(self, name: str, value: str) -> None:
        """Store ``value`` under ``name``, replacing what was there."""
        self.execute(
            "INSERT INTO ackledger_meta (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def meta_under(self, prefix: str) -> list[tuple[str, str]]:
        """Every (name, value) whose name starts with ``prefix``, by name."""
        rows = self.execute(
            "SELECT name, value FROM ackledger_meta WHERE substr(name, 1, ?) = ? ORDER BY name",
            (len(prefix), prefix),
        )
        return [(str(name), str(value)) for name, value in rows]

    def outbox_pending(self, limit: int) -> list[PendingRow]:
        # The WHERE clause matches the partial index outbox_pending exactly.
        rows = self.execute(
            f"SELECT {PENDING_SELECT} FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 "
            "ORDER BY seq LIMIT ?",
            (limit,),
        )
        return pending_rows(rows)

    def outbox_mark_sent(self, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
        """Mark ids sent (a batch in one statement); returns the ids that are unknown, in order."""
        if len(ids) == 1:
            return [] if self.outbox_mark_one(ids[0], attempted, now) else [ids[0]]
        bump = 1 if attempted else 0
        found: set[str] = set()
        unique = list(dict.fromkeys(ids))  # an id given twice is one mark and one attempt
        for start in range(0, len(unique), MARK_CHUNK):
            chunk = unique[start : start + MARK_CHUNK]
            marks = ", ".join("?" * len(chunk))
            rows = self.execute(
                _MARK_SET + f"WHERE id IN ({marks}) RETURNING id", (now, bump, bump, now, *chunk)
            )
            found.update(str(row[0]) for row in rows)
        return [event_id for event_id in ids if event_id not in found]

    def outbox_mark_one(self, event_id: str, attempted: bool, now: float) -> bool:
        """The per-item relay's mark: one id, one statement (prepared once, nothing built),
        all or nothing by itself (so also for ``Backend.statements``); False if unknown."""
        return bool(self.execute(_MARK_ONE, mark_one_params(event_id, attempted, now)))

    def outbox_mark_sent_whole(self, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
        """``outbox_mark_sent`` of at most ``MARK_CHUNK`` distinct ids, for a caller with no
        transaction around it (``Backend.statements``): it marks all of them or none, and
        returns the unknown ids. Here, for a dialect whose ``statements`` is a transaction
        (the caller's KeyError rolls it back), the same as ``outbox_mark_sent``."""
        return self.outbox_mark_sent(ids, attempted, now)

    def outbox_record_failure(self, event_id: str, error: str, now: float) -> bool:
        rows = self.execute(
            "UPDATE ackledger_outbox SET attempts = attempts + 1, last_error = ?, "
            "last_attempt_at = ? "
            "WHERE id = ? RETURNING seq",
            (error, now, event_id),
        )
        return bool(rows)

    def outbox_amend_error(self, event_id: str, error: str) -> bool:
        """Replace the last error's text without counting another attempt."""
        return bool(
            self.execute(
                "UPDATE ackledger_outbox SET last_error = ? WHERE id = ? RETURNING seq",
                (error, event_id),
            )
        )

    def outbox_event(self, event_id: str) -> dict[str, Any] | None:
        row = self.one(
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM ackledger_outbox WHERE id = ?", (event_id,)
        )
        return None if row is None else dict(zip(EVENT_COLUMNS, row, strict=True))

    # --- operations: quarantine, requeue, statistics, retention (migration 0003) ----------

    def outbox_status(self, event_id: str) -> tuple[int, int, int, float | None] | None:
        """(seq, sent, quarantined, quarantined_at) of one event, or None."""
        row = self.one(
            "SELECT seq, sent, quarantined, quarantined_at FROM ackledger_outbox WHERE id = ?",
            (event_id,),
        )
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]), row[3])

    def outbox_quarantine(self, event_id: str, reason: str, now: float) -> int | None:
        """Take a pending event out of pending; returns its seq, or None if it was not pending.

        The state test is in the UPDATE itself, so a concurrent mark cannot slip in between a
        check and the change on either backend.
        """
        seq = self.scalar(
            "UPDATE ackledger_outbox SET quarantined = 1, quarantine_reason = ?, "
            "quarantined_at = ? "
            "WHERE id = ? AND sent = 0 AND quarantined = 0 RETURNING seq",
            (reason, now, event_id),
        )
        return None if seq is None else int(seq)

    def outbox_requeue(self, event_id: str) -> int | None:
        """Put a quarantined event back into pending; returns its seq, or None if it was not
        quarantined (the state test is in the UPDATE, as in ``outbox_quarantine``)."""
        seq = self.scalar(
            "UPDATE ackledger_outbox SET quarantined = 0, quarantine_reason = NULL, "
            "quarantined_at = NULL "
            "WHERE id = ? AND sent = 0 AND quarantined = 1 RETURNING seq",
            (event_id,),
        )
        return None if seq is None else int(seq)

    def outbox_sent_after(self, seq: int, since: float) -> list[tuple[int, str]]:
        """Later events (higher seq) marked sent at or after ``since``: who overtook ``seq``."""
        rows = self.execute(
            "SELECT seq, id FROM ackledger_outbox WHERE seq > ? AND sent = 1 AND sent_at >= "
            "? ORDER BY seq",
            (seq, since),
        )
        return [(int(s), str(i)) for s, i in rows]

    def outbox_log_append(self, event_id: str, kind: str, detail: str, now: float) -> None:
        self.execute(
            "INSERT INTO ackledger_outbox_log (event_id, kind, detail, at) VALUES (?, ?, ?, ?)",
            (event_id, kind, detail, now),
        )

    def outbox_log(self, event_id: str) -> list[dict[str, Any]]:
        rows = self.execute(
            f"SELECT {', '.join(LOG_COLUMNS)} FROM ackledger_outbox_log WHERE event_id = ? "
            f"ORDER BY seq",
            (event_id,),
        )
        return [dict(zip(LOG_COLUMNS, row, strict=True)) for row in rows]

    def outbox_quarantined(self) -> list[dict[str, Any]]:
        # Matches the partial index outbox_quarantined.
        rows = self.execute(
            f"SELECT {', '.join(QUARANTINED_COLUMNS)} FROM ackledger_outbox "
            "WHERE quarantined = 1 AND sent = 0 ORDER BY seq"
        )
        return [dict(zip(QUARANTINED_COLUMNS, row, strict=True)) for row in rows]

    def outbox_pending_summary(self) -> tuple[int, float | None]:
        """(count, created_at of the first) of the sendable events, read through outbox_pending."""
        count = int(
            self.scalar("SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0")
        )
        oldest = self.scalar(
            "SELECT created_at FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 "
            "ORDER BY seq LIMIT 1"
        )
        return count, None if oldest is None else float(oldest)

    def outbox_totals(self) -> tuple[int, int, int]:
        """(sent, quarantined, attempts) over the rows the outbox still holds."""
        sent = int(self.scalar("SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 1"))
        quarantined = int(
            self.scalar("SELECT COUNT(*) FROM ackledger_outbox WHERE quarantined = 1 AND sent = 0")
        )
        attempts = int(self.scalar("SELECT COALESCE(SUM(attempts), 0) FROM ackledger_outbox"))
        return sent, quarantined, attempts

    def outbox_last_unsent_error(self) -> dict[str, Any] | None:
        """The latest error of an event that is still not sent (pending or quarantined)."""
        found: list[tuple[Any, ...]] = []
        for state in ("sent = 0 AND quarantined = 0", "quarantined = 1 AND sent = 0"):
            found += self.execute(
                f"SELECT id, last_error, last_attempt_at FROM ackledger_outbox WHERE {state} "
                "AND last_error IS NOT NULL ORDER BY last_attempt_at DESC LIMIT 1"
            )
        if not found:
            return None
        event_id, error, at = max(found, key=lambda row: row[2] or 0.0)
        return {"id": event_id, "error": error, "at": at}

    def outbox_purged_totals(self) -> tuple[int, int]:
        """(sent rows, their attempts) that purge has deleted over the database's life."""
        found = self.counters_read("outbox.")
        prefix = len("outbox.")
        return found.get(PURGED_SENT[prefix:], 0), found.get(PURGED_ATTEMPTS[prefix:], 0)

    def outbox_purge_sent(self, cutoff: float) -> int:
        """Delete sent rows whose sent_at is before ``cutoff``; returns how many.

        Their attempts and their number move into durable counters first, so that the totals an
        operator watches do not fall when old rows go.
        """
        count, attempts = self._delete_sent_before(cutoff)
        if count == 0:
            return 0
        self.counter_bump(PURGED_SENT, count)
        self.counter_bump(PURGED_ATTEMPTS, attempts)
        return count

    @abc.abstractmethod
    def _delete_sent_before(self, cutoff: float) -> tuple[int, int]:
        """Delete the rows ``SENT_BEFORE`` selects; returns (rows, their attempts), counted
        so that two purges at once never count the same row."""


def outbox_claim_row(
    event: dict[str, Any], text: str, fingerprint: str, partition_key: str, now: float
) -> tuple[Any, ...]:
    """The parameters of an outbox claim (``keys.OUTBOX_COLUMNS``) of a validated event."""
    data = event.get("data")
    return (
        event["id"],
        fingerprint,
        event["source"],
        event["type"],
        event.get("subject"),
        event.get("partitionkey"),
        partition_key,
        None if data is None else canonical_json(data),
        text,
        now,
    )


def mark_one_params(event_id: str, attempted: bool, now: float) -> tuple[Any, ...]:
    """``MARK_ONE``'s parameters: sent at ``now``, one attempt more if ``attempted``."""
    bump = 1 if attempted else 0
    return (now, bump, bump, now, event_id)
