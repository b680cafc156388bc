"""Inbox retention (CONTRACT v2 section 10) on every backend: ``Inbox.purge`` deletes the
receipts older than the horizon, a chunk per transaction, and nothing else; a receipt inside
the horizon still answers duplicate; the counters never go down."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ackledger import Inbox
from ackledger.ops.processes import run_cli

from ..events import SOURCE, lab
from ..race import at_once
from .conftest import Target

DAY = 86400.0


def _receive(inbox: Inbox, *ids: str) -> None:
    for event_id in ids:
        assert inbox.receive(lab(event_id, "apple", 1)) == "applied"


def _age(target: Target, seconds: float, *ids: str) -> None:
    """Move receipts' first arrival ``seconds`` into the past (the test's hand on the clock)."""
    for event_id in ids:
        target.execute(
            "UPDATE ackledger_inbox SET first_received_at = first_received_at - ? WHERE id = ?",
            (seconds, event_id),
        )


def _ids(target: Target) -> list[str]:
    return sorted(str(row[0]) for row in target.rows("SELECT id FROM ackledger_inbox"))


def test_purge_deletes_only_receipts_older_than_the_horizon(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        _receive(inbox, "old-1", "old-2", "recent")
        assert inbox.receive(lab("old-1", "apple", 1)) == "duplicate"
        _age(target, 31 * DAY, "old-1", "old-2")
        _age(target, 29 * DAY, "recent")
        before = inbox.counters()
        assert inbox.purge() == 2  # the default horizon: 30 days
        assert _ids(target) == ["recent"]
        # Inside the horizon: still a duplicate, no second effect.
        assert inbox.receive(lab("recent", "apple", 1)) == "duplicate"
        assert inbox.stock("apple") == 3
        # The counters did not fall; the purged receipts are counted durably.
        after = inbox.counters()
        assert after == {**before, "duplicate": before["duplicate"] + 1}
        assert after == {"applied": 3, "duplicate": 2, "conflict": 0}
        assert inbox.retention()["purged"] == 2
        # Outside it the receipt is gone: a late re-send is applied again (why the horizon
        # must outlast every redelivery window).
        assert inbox.receive(lab("old-2", "apple", 1)) == "applied"
        assert inbox.stock("apple") == 4
    # Another process reads the same durable count.
    with Inbox(target.ref) as again:
        assert again.retention()["purged"] == 2
        assert again.purge() == 0
        assert again.retention()["purged"] == 2


def test_purge_goes_a_window_per_transaction(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        ids = [f"c-{n:02d}" for n in range(25)]
        _receive(inbox, *ids)
        for n, event_id in enumerate(ids):
            _age(target, 40 * DAY - n, event_id)
        assert inbox.purge(35 * DAY, chunk=10) == 25
        assert _ids(target) == []
        assert inbox.retention() == {"purged": 25, "oldest_receipt_age_s": None}
        assert inbox.counters()["applied"] == 25


def test_the_oldest_receipt_age_follows_the_oldest_kept_receipt(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        assert inbox.retention()["oldest_receipt_age_s"] is None
        _receive(inbox, "a", "b")
        _age(target, 10 * DAY, "a")
        _age(target, 2 * DAY, "b")
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 10 * DAY <= age < 10 * DAY + 60
        inbox.purge(5 * DAY)
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 2 * DAY <= age < 2 * DAY + 60


def test_a_horizon_under_an_hour_needs_force(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        _receive(inbox, "fresh")
        with pytest.raises(ValueError, match=r"older_than_seconds.*force"):
            inbox.purge(60)
        assert _ids(target) == ["fresh"]
        time.sleep(0.05)
        assert inbox.purge(0.01, force=True) == 1
        assert _ids(target) == []


BAD_ARGUMENTS: list[tuple[tuple[Any, ...], str]] = [
    ((0,), "older_than_seconds"),
    ((-1,), "older_than_seconds"),
    ((float("nan"),), "older_than_seconds"),
    (("30d",), "older_than_seconds"),
    ((True,), "older_than_seconds"),
    ((DAY, 0), "chunk"),
    ((DAY, 1.5), "chunk"),
    ((DAY, 10**6), "chunk"),
]


def test_bad_arguments_name_themselves_and_delete_nothing(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        _receive(inbox, "kept")
        _age(target, 400 * DAY, "kept")
        before = target.dump()
        for (older_than, *rest), named in BAD_ARGUMENTS:
            with pytest.raises(ValueError, match=named):
                if rest:
                    inbox.purge(older_than, chunk=rest[0])
                else:
                    inbox.purge(older_than)
        with pytest.raises(ValueError, match="force"):
            inbox.purge(DAY, force=1)  # type: ignore[arg-type]
        assert target.dump() == before


@pytest.mark.slow
def test_the_cli_purges_with_a_duration_and_refuses_bad_ones(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        _receive(inbox, "old", "new")
    _age(target, 8 * DAY, "old")
    before = target.dump()
    for bad in (["--older-than", "7"], ["--older-than", "0d"], ["--older-than", "30m"]):
        done = run_cli("inbox", "purge", "--db", target.ref, *bad)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "--older-than" in done.stderr
        assert "Traceback" not in done.stderr
    assert target.dump() == before
    done = run_cli("inbox", "purge", "--db", target.ref, "--older-than", "7d")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("purged 1 receipts")
    assert _ids(target) == ["new"]
    assert target.rows("SELECT source FROM ackledger_inbox") == [(SOURCE,)]


def test_the_cli_purges_one_inbox_name_of_those_sharing_the_database(target: Target) -> None:
    for name in ("default", "billing"):
        with Inbox(target.ref, name=name) as inbox:
            _receive(inbox, "old")
    _age(target, 8 * DAY, "old")
    before = target.dump()
    done = run_cli("inbox", "purge", "--db", target.ref, "--inbox-name", "bill\ting")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--inbox-name: must not hold" in done.stderr
    assert target.dump() == before
    done = run_cli(
        "inbox", "purge", "--db", target.ref, "--inbox-name", "billing", "--older-than", "7d"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("purged 1 receipts")
    assert target.rows("SELECT name FROM ackledger_inbox") == [("default",)]


@pytest.mark.slow
def test_purges_at_once_and_receives_meanwhile_count_each_receipt_once(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        old = [f"o-{n:03d}" for n in range(120)]
        for start in range(0, len(old), 16):
            inbox.receive_batch([lab(event_id, "apple", 1) for event_id in old[start : start + 16]])
        for event_id in old:
            _age(target, 40 * DAY, event_id)

    def act(_: int, party: str) -> int:
        with Inbox(target.ref) as own:
            if party == "purge":
                return own.purge(DAY, chunk=7)
            for m in range(10):
                assert own.receive(lab(f"new-{m}", "apple", 1)) == "applied"
            return 0

    done = at_once(["purge", "purge", "receive"], act)
    assert sum(done[:2]) == 120
    with Inbox(target.ref) as inbox:
        assert inbox.retention()["purged"] == 120
        assert inbox.counters() == {"applied": 130, "duplicate": 0, "conflict": 0}
        assert len(_ids(target)) == 10
