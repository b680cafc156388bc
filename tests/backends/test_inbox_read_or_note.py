"""``Backend.inbox_read_or_note``: a lone event's read by key and, for a re-send of the same
content, its note, in one call of the backend, on every backend:
the same rows and counts as the read and the note made apart."""

from __future__ import annotations

from ackledger import Inbox, warehouse
from ackledger.envelope import fingerprint_of, validate_encoded

from .conftest import Target

SOURCE = "urn:tests:read-or-note"


def _fingerprint(event_id: str, qty: int) -> str:
    event, text = validate_encoded(warehouse.event(event_id, "tea", qty, source=SOURCE))
    return fingerprint_of(event, text)


def _receipt(target: Target, event_id: str) -> list[tuple[object, ...]]:
    query = (
        "SELECT receipts, last_received_at, arrival, last_arrival FROM ackledger_inbox WHERE id = ?"
    )
    return [tuple(row) for row in target.rows(query, (event_id,))]


def _counts(target: Target) -> dict[str, int]:
    rows = target.rows("SELECT name, value FROM ackledger_counters WHERE name LIKE ?", ("sink.%",))
    return {str(name): int(value) for name, value in rows}


def test_a_free_identity_is_read_and_nothing_is_written(target: Target) -> None:
    inbox = Inbox(target.ref)
    try:
        before = target.dump()
        found = inbox._db.inbox_read_or_note(
            SOURCE, "free", _fingerprint("free", 1), 100.0, "sink.duplicate", name="default"
        )
        assert found is None
        assert target.dump() == before
    finally:
        inbox.close()


def test_a_resend_is_noted_and_other_content_is_only_read(target: Target) -> None:
    inbox = Inbox(target.ref)
    try:
        assert inbox.receive(warehouse.event("r-1", "tea", 2, source=SOURCE)) == "applied"
        assert inbox.receive(warehouse.event("r-2", "tea", 1, source=SOURCE)) == "applied"
        same, other = _fingerprint("r-1", 2), _fingerprint("r-1", 5)
        (first,) = _receipt(target, "r-1")
        counts = _counts(target)
        db = inbox._db

        # Other content under the identity: its fingerprint is returned, nothing is written
        # (the conflict is the caller's to decide and count).
        before = target.dump()
        found = db.inbox_read_or_note(SOURCE, "r-1", other, 200.0, "sink.duplicate", name="default")
        assert found == same
        assert target.dump() == before

        # The same content: noted as the general way notes a lone re-send, the next arrival
        # number taken, the duplicate and arrival counts bumped, all committed.
        found = db.inbox_read_or_note(SOURCE, "r-1", same, 300.0, "sink.duplicate", name="default")
        assert found == same
        assert _receipt(target, "r-1") == [(2, 300.0, first[2], 3)]
        assert _counts(target) == {
            **counts,
            "sink.duplicate": counts.get("sink.duplicate", 0) + 1,
            "sink.arrival": counts["sink.arrival"] + 1,
        }
        assert inbox.counters() == {"applied": 2, "duplicate": 1, "conflict": 0}
        # The next new event takes the number after the note's.
        assert inbox.receive(warehouse.event("r-3", "tea", 1, source=SOURCE)) == "applied"
        assert _receipt(target, "r-3")[0][2:] == (4, 4)
    finally:
        inbox.close()
