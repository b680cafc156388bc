"""Refused messages: what a consumer refused for good, kept in the inbox's database (0013).

A refusal is recorded before the broker is told to drop the message, so a crash in between
brings the message back and records it again: the upsert on (refusal key, reason) makes that
one row whose ``refusals`` grows, never a second row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from .executor import Executor

TABLE = "ackledger_refused"
#: What the table keeps of a message's bytes (CONTRACT section 13).
MAX_KEPT_BYTES = 64 * 1024
COLUMNS = (
    "refused_no", "source", "id", "reason", "message", "message_bytes", "content_type",
    "refused_at", "last_refused_at", "refusals",
)  # fmt: skip

_RECORD = (
    f"INSERT INTO {TABLE} (source, id, refusal_key, reason, message, message_bytes, "
    "content_type, refused_at, last_refused_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (refusal_key, reason) DO UPDATE SET "
    f"last_refused_at = excluded.last_refused_at, refusals = {TABLE}.refusals + 1 "
    "RETURNING refused_no"
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"


def refusal_key(event_id: str | None, source: str | None, message: bytes) -> str:
    """Who a refusal is about: the identity when the message had one, else its bytes' hash
    (hashed either way: a refused message's claimed identity may hold any character)."""
    if event_id is not None and source is not None:
        return "identity:" + hashlib.sha256(json.dumps([event_id, source]).encode()).hexdigest()
    return "sha256:" + hashlib.sha256(message).hexdigest()


def _text(value: str | None) -> str | None:
    """A text column's value: PostgreSQL's text holds no NUL, which an invalid message's
    claimed identity or a reason quoting it may carry."""
    return None if value is None else value.replace("\x00", "\ufffd")


def _row(row: Sequence[Any]) -> dict[str, Any]:
    found = dict(zip(COLUMNS, row, strict=True))
    found["message"] = bytes(found["message"])
    return found


class RefusedQueries(Executor):
    def refused_record(
        self,
        event_id: str | None,
        source: str | None,
        reason: str,
        *,
        message: bytes,
        content_type: str | None,
        now: float,
    ) -> int:
        """Record one refusal (or count it again, same key and reason); returns its number."""
        key = refusal_key(event_id, source, message)
        kept = message[:MAX_KEPT_BYTES]
        params = (
            _text(source), _text(event_id), key, _text(reason), kept, len(message),
            _text(content_type), now, now,
        )  # fmt: skip
        return int(self.scalar(_RECORD, params))

    def refused_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The refused messages, oldest first (at most ``limit``)."""
        if limit is None:
            rows = self.execute(f"{_SELECT} ORDER BY refused_no")
        else:
            rows = self.execute(f"{_SELECT} ORDER BY refused_no LIMIT ?", (limit,))
        return [_row(row) for row in rows]

    def refused_count(self) -> int:
        return int(self.scalar(f"SELECT COUNT(*) FROM {TABLE}"))

    def refused_get(self, refused_no: int) -> dict[str, Any] | None:
        row = self.one(f"{_SELECT} WHERE refused_no = ?", (refused_no,))
        return None if row is None else _row(row)

    def refused_of(self, event_id: str, source: str | None = None) -> list[dict[str, Any]]:
        """The refusals of messages with this id (of this source, if given), oldest first."""
        if source is None:
            rows = self.execute(f"{_SELECT} WHERE id = ? ORDER BY refused_no", (event_id,))
        else:
            rows = self.execute(
                f"{_SELECT} WHERE id = ? AND source = ? ORDER BY refused_no", (event_id, source)
            )
        return [_row(row) for row in rows]

    def refused_among(self, ids: Sequence[str]) -> dict[tuple[str, str], str]:
        """The latest reason of each refused (id, source) whose id is one of ``ids``."""
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        rows = self.execute(
            f"SELECT id, source, reason FROM {TABLE} WHERE id IN ({marks}) ORDER BY refused_no",
            tuple(ids),
        )
        return {(str(event_id), str(source)): str(reason) for event_id, source, reason in rows}

    def refused_delete(self, refused_no: int) -> bool:
        gone = self.execute(f"DELETE FROM {TABLE} WHERE refused_no = ? RETURNING 1", (refused_no,))
        return bool(gone)
