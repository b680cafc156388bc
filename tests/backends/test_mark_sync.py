"""``dispatch(mark_sync="last")``: marks committed as earned, the disk waited for once per call.

The contract rules of dispatch hold in both modes (the rest of the backend suite); these tests
pin what differs: which commits wait for the disk, that a relaxed commit really is relaxed and
really is committed (a crash of the process keeps it), and that every way out of a call ends
with a durable write.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest

from ackledger import Outbox, dispatch
from ackledger.source.dispatch import StopRequested

from .conftest import Target


def fill(ob: Outbox, n: int) -> list[str]:
    ids = [f"ms-{k}" for k in range(n)]
    for k, event_id in enumerate(ids):
        ob.accept({"id": event_id, "sku": "s", "qty": k + 1})
    return ids


def sent_ids(target: Target) -> list[str]:
    return [
        row[0] for row in target.rows("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq")
    ]


class Recording:
    """A real Outbox, with a note of every write dispatch asks of it (and whether it asked the
    write to wait for the disk)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.writes: list[tuple[str, str, bool]] = []

    def pending(self, limit: int = 16) -> list[dict[str, Any]]:
        return self.outbox.pending(limit)

    def mark_sent(self, event_id: str, *, attempted: bool = False, durable: bool = True) -> None:
        self.writes.append(("mark", event_id, durable))
        self.outbox.mark_sent(event_id, attempted=attempted, durable=durable)

    def mark_sent_many(
        self, event_ids: Sequence[str], *, attempted: bool = False, durable: bool = True
    ) -> None:
        raise AssertionError("dispatch marks one event at a time")

    def record_failure(self, event_id: str, error: str) -> None:
        self.writes.append(("failure", event_id, True))
        self.outbox.record_failure(event_id, error)


def durability_setting(ob: Outbox, target: Target) -> str:
    with ob.backend.read() as tx:
        if target.dialect == "postgres":
            return str(tx.execute("SHOW synchronous_commit")[0][0])
        return str(tx.execute("PRAGMA synchronous")[0][0])


def test_a_relaxed_write_skips_only_its_own_wait(target: Target) -> None:
    relaxed, strict = ("off", "on") if target.dialect == "postgres" else ("1", "2")
    with Outbox(target.ref) as ob:
        fill(ob, 2)
        with ob.backend.write(durable=False) as tx:
            if target.dialect == "postgres":
                inside = str(tx.execute("SHOW synchronous_commit")[0][0])
            else:
                inside = str(tx.execute("PRAGMA synchronous")[0][0])
            tx.execute("UPDATE ackledger_outbox SET sent = 1 WHERE id = ?", ("ms-0",))
        assert inside == relaxed
        # Committed (another connection sees it), and the next write waits for the disk again.
        assert sent_ids(target) == ["ms-0"]
        assert durability_setting(ob, target) == strict
        with ob.backend.write() as tx:
            if target.dialect == "postgres":
                assert str(tx.execute("SHOW synchronous_commit")[0][0]) == strict
            else:
                assert str(tx.execute("PRAGMA synchronous")[0][0]) == strict


def test_a_relaxed_write_that_fails_rolls_back_and_restores_the_setting(target: Target) -> None:
    strict = "on" if target.dialect == "postgres" else "2"
    with Outbox(target.ref) as ob:
        fill(ob, 1)
        with pytest.raises(RuntimeError), ob.backend.write(durable=False) as tx:
            tx.execute("UPDATE ackledger_outbox SET sent = 1 WHERE id = ?", ("ms-0",))
            raise RuntimeError("abandon")
        assert sent_ids(target) == []
        assert durability_setting(ob, target) == strict


def test_normal_database_stays_normal(target: Target) -> None:
    # durable=True must not upgrade a database opened with synchronous=NORMAL either.
    relaxed = "off" if target.dialect == "postgres" else "1"
    with Outbox(target.ref, synchronous="NORMAL") as ob:
        fill(ob, 1)
        ob.mark_sent("ms-0", durable=False)
        assert durability_setting(ob, target) == relaxed


def test_last_mode_waits_for_the_disk_once_per_call(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 5)
        rec = Recording(ob)
        assert dispatch(rec, lambda e: True, mark_sync="last") == ids
        assert rec.writes == [("mark", i, i == ids[-1]) for i in ids]
        assert sent_ids(target) == ids
        # Each mark still counted its attempt.
        assert [
            r[0] for r in target.rows("SELECT attempts FROM ackledger_outbox ORDER BY seq")
        ] == [1] * 5


def test_each_mode_waits_for_every_mark(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 3)
        rec = Recording(ob)
        assert dispatch(rec, lambda e: True) == ids
        assert rec.writes == [("mark", i, True) for i in ids]


def test_a_failure_is_the_durable_write_that_ends_the_call(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 5)
        rec = Recording(ob)
        boom = ConnectionError("third lost")

        def send(event: dict[str, Any]) -> bool:
            if event["id"] == ids[2]:
                raise boom
            return True

        with pytest.raises(ConnectionError) as info:
            dispatch(rec, send, mark_sync="last")
        assert info.value is boom
        assert rec.writes == [
            ("mark", ids[0], False),
            ("mark", ids[1], False),
            ("failure", ids[2], True),
        ]
        assert sent_ids(target) == ids[:2]


def test_a_stop_between_sends_marks_the_latest_again_durably(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 5)
        rec = Recording(ob)

        def send(event: dict[str, Any]) -> bool:
            if event["id"] == ids[2]:
                raise StopRequested
            return True

        with pytest.raises(StopRequested):
            dispatch(rec, send, mark_sync="last")
        assert rec.writes == [
            ("mark", ids[0], False),
            ("mark", ids[1], False),
            ("mark", ids[1], True),
        ]
        assert sent_ids(target) == ids[:2]
        # The second mark of the same event counted no second attempt.
        attempts = target.rows("SELECT attempts FROM ackledger_outbox WHERE id = ?", (ids[1],))
        assert attempts[0][0] == 1


@pytest.mark.parametrize("mode", ["Last", "", "none", None, 1])
def test_mark_sync_is_checked_before_anything_is_sent(target: Target, mode: object) -> None:
    with Outbox(target.ref) as ob:
        fill(ob, 2)
        sent: list[str] = []

        def send(event: dict[str, Any]) -> bool:
            sent.append(event["id"])
            return True

        with pytest.raises(ValueError, match="mark_sync"):
            dispatch(ob, send, mark_sync=mode)  # type: ignore[arg-type]
        assert sent == []
        assert sent_ids(target) == []


# The process dies in the middle of a call (os._exit: no finally, no close): the marks it had
# committed without waiting for the disk are there for the next reader.
DYING_RELAY = textwrap.dedent(
    """
    import os, sys
    from ackledger import Outbox, dispatch
    outbox = Outbox(sys.argv[1])
    seen = []
    def send(event):
        seen.append(event["id"])
        if len(seen) == 4:
            os._exit(9)
        return True
    dispatch(outbox, send, mark_sync="last")
    """
)


@pytest.mark.slow
def test_relaxed_marks_survive_a_crash_of_the_process(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ids = fill(ob, 6)
    done = subprocess.run(
        [sys.executable, "-c", DYING_RELAY, target.ref],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    assert sent_ids(target) == ids[:3]
