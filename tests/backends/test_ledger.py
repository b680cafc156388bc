"""CONTRACT section 7 (Ledger, the Python face) on every backend, read back independently."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from ackledger import Conflict, InvalidEvent, Ledger
from ackledger.ledger.ledger import DEFAULT_RETENTION_SECONDS, PayloadConflict, check_request
from ackledger.store.ledger import PURGE_CHUNK
from ackledger.store.postgres.queries import COUNTER_SHARDS

from .. import pg
from ..race import at_once
from . import purge_race
from .conftest import Target

DAY = 86400.0


@pytest.fixture
def ledger(target: Target) -> Iterator[Ledger]:
    with Ledger(target.ref) as opened:
        yield opened


def count(target: Target, table: str) -> int:
    (found,) = target.rows(f"SELECT COUNT(*) FROM ackledger_{table}")[0]
    assert isinstance(found, int)
    return found


def test_a_retry_in_a_new_pod_gets_the_same_delivery(ledger: Ledger, target: Target) -> None:
    first = ledger.request("case-1", "order-1", "pod-A")
    retry = ledger.request("case-1", "order-1", "pod-B")
    rerun = ledger.request("case-1", "order-1", "pod-C")
    assert first == {
        "delivery_no": first["delivery_no"],
        "duplicate": False,
        "attempt": 1,
        "state": "in_progress",
    }
    assert retry == {
        "delivery_no": first["delivery_no"],
        "duplicate": True,
        "attempt": 2,
        "state": "in_progress",
    }
    assert rerun == {
        "delivery_no": first["delivery_no"],
        "duplicate": True,
        "attempt": 3,
        "state": "in_progress",
    }
    assert target.rows("SELECT delivery_no, case_id, work_id FROM ackledger_deliveries") == [
        (first["delivery_no"], "case-1", "order-1")
    ]
    assert target.rows(
        "SELECT pod_uid, mode, outcome, delivery_no FROM ackledger_attempts ORDER BY attempt_no"
    ) == [
        ("pod-A", "idempotent", "applied", first["delivery_no"]),
        ("pod-B", "idempotent", "duplicate", first["delivery_no"]),
        ("pod-C", "idempotent", "duplicate", first["delivery_no"]),
    ]


def test_reopening_keeps_every_number(target: Target) -> None:
    with Ledger(target.ref) as first:
        numbers = {w: first.request("c", w, "pod-A")["delivery_no"] for w in ("w1", "w2", "w3")}
    with Ledger(target.ref, synchronous="NORMAL") as again:
        for work_id, number in numbers.items():
            answer = again.request("c", work_id, "pod-B")
            assert answer == {
                "delivery_no": number,
                "duplicate": True,
                "attempt": 2,
                "state": "in_progress",
            }
        fresh = again.request("c", "w4", "pod-B")["delivery_no"]
    assert fresh > max(numbers.values())


def test_different_keys_are_different_work(ledger: Ledger) -> None:
    numbers = {
        ledger.request(case_id, work_id, "pod")["delivery_no"]
        for case_id, work_id in [("c1", "w1"), ("c1", "w2"), ("c2", "w1"), ("c2", "w2")]
    }
    assert len(numbers) == 4
    # The key is exact: neither case nor letters are folded.
    assert ledger.request("C1", "w1", "pod")["duplicate"] is False
    assert ledger.request("c1", "W1", "pod")["duplicate"] is False


def test_control_mode_makes_a_delivery_for_every_request(ledger: Ledger, target: Target) -> None:
    answers = [ledger.request("c", "w", f"pod-{i}", mode="control") for i in range(3)]
    assert [a["duplicate"] for a in answers] == [False, False, False]
    assert [a["attempt"] for a in answers] == [1, 2, 3]
    assert len({a["delivery_no"] for a in answers}) == 3
    assert target.rows("SELECT COUNT(*), MIN(mode), MAX(mode) FROM ackledger_deliveries") == [
        (3, "control", "control")
    ]
    assert target.rows(
        "SELECT mode, outcome, delivery_no FROM ackledger_attempts ORDER BY attempt_no"
    ) == [("control", "applied", a["delivery_no"]) for a in answers]


def test_control_deliveries_do_not_take_the_idempotent_key(ledger: Ledger) -> None:
    control = ledger.request("c", "w", "pod-A", mode="control")
    first = ledger.request("c", "w", "pod-B")
    again = ledger.request("c", "w", "pod-C")
    assert first["duplicate"] is False and first["delivery_no"] != control["delivery_no"]
    assert again["delivery_no"] == first["delivery_no"] and again["duplicate"] is True
    # The attempt count is per key, whatever the mode.
    assert again["attempt"] == 3


def test_same_payload_is_a_duplicate_whatever_its_key_order(ledger: Ledger) -> None:
    first = ledger.request("c", "w", "pod-A", payload={"sku": "pen", "qty": 2})
    again = ledger.request("c", "w", "pod-B", payload={"qty": 2, "sku": "pen"})
    assert again == {
        "delivery_no": first["delivery_no"],
        "duplicate": True,
        "attempt": 2,
        "state": "in_progress",
    }


@pytest.mark.parametrize(
    ("created_with", "then"),
    [
        ({"qty": 2}, {"qty": 3}),
        (None, {}),  # no payload fingerprints as JSON null, an empty object does not
        ({"qty": 2}, None),
        ({"qty": 2}, {"qty": 2.5}),
    ],
)
def test_another_payload_is_a_recorded_conflict_without_delivery(
    ledger: Ledger, target: Target, created_with: Any, then: Any
) -> None:
    first = ledger.request("c", "w", "pod-A", payload=created_with)
    with pytest.raises(PayloadConflict) as refused:
        ledger.request("c", "w", "pod-B", payload=then)
    assert isinstance(refused.value, Conflict)
    assert refused.value.attempt == 2
    assert refused.value.delivery_no == first["delivery_no"]
    # The refusal committed its attempt row (with no delivery) and nothing else.
    assert count(target, "deliveries") == 1
    assert target.rows(
        "SELECT pod_uid, outcome, delivery_no FROM ackledger_attempts ORDER BY attempt_no"
    ) == [("pod-A", "applied", first["delivery_no"]), ("pod-B", "conflict", None)]
    assert ledger.counters() == {"attempts": 2, "deliveries": 1, "duplicates": 0, "conflicts": 1}
    # The key keeps its first payload: that one is still a duplicate.
    assert ledger.request("c", "w", "pod-C", payload=created_with)["duplicate"] is True


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


GOOD = {"case_id": "c", "work_id": "w", "pod_uid": "pod", "mode": "idempotent", "payload": None}

BAD: list[tuple[str, Any]] = [
    ("case_id", ""),
    ("case_id", "x" * 129),
    ("case_id", "has space"),
    ("case_id", "-starts-with-dash"),
    ("case_id", "é"),
    ("case_id", 5),
    ("case_id", None),
    ("work_id", ""),
    ("work_id", "a/b"),
    ("work_id", b"bytes"),
    ("pod_uid", ""),
    ("pod_uid", "x" * 129),
    ("pod_uid", "pöd"),
    ("pod_uid", "tab\there"),
    ("pod_uid", "new\nline"),
    ("pod_uid", "del\x7f"),
    ("pod_uid", 7),
    ("mode", "Idempotent"),
    ("mode", ""),
    ("mode", None),
    ("mode", 1),
    ("payload", []),
    ("payload", "text"),
    ("payload", 3),
    ("payload", {"a": float("nan")}),
    ("payload", {"a": float("inf")}),
    ("payload", {1: "int key"}),
    ("payload", {"a": object()}),
    ("payload", {"a": (1, 2)}),
    ("payload", {"a": "\ud800"}),
    ("payload", _nested(33)),
]


def test_bad_input_names_the_field_and_writes_nothing(ledger: Ledger, target: Target) -> None:
    # One database for the whole list (a database per case would cost seconds on PostgreSQL);
    # a key already recorded makes "writes nothing" cover a duplicate's counters too.
    ledger.request("c", "w", "pod-0")
    before = target.dump()
    for field, value in BAD:
        with pytest.raises(InvalidEvent) as refused:
            ledger.request(**{**GOOD, field: value})
        assert refused.value.field == field, (field, value)
        assert str(refused.value).startswith(f"{field}:"), (field, value)
    assert target.dump() == before


def test_limits_are_inclusive(ledger: Ledger) -> None:
    answer = ledger.request(
        "c" * 128,
        "A0._:-" + "w" * 122,
        " !~" + "p" * 125,
        mode="control",
        payload=_nested(32) | {"list": [1, "two", None, True, 2.5], "ünï": "cödé"},
    )
    assert answer["duplicate"] is False
    rows = ledger.attempts("c" * 128)
    assert rows[0]["pod_uid"] == " !~" + "p" * 125


def test_listings_filter_by_case_and_keep_their_order(ledger: Ledger) -> None:
    ledger.request("a", "w2", "p1")
    ledger.request("b", "w1", "p2")
    ledger.request("a", "w1", "p3")
    ledger.request("a", "w2", "p4")
    assert [(d["case_id"], d["work_id"]) for d in ledger.deliveries()] == [
        ("a", "w2"),
        ("b", "w1"),
        ("a", "w1"),
    ]
    assert [(d["work_id"], d["pod_uid"]) for d in ledger.deliveries("a")] == [
        ("w2", "p1"),
        ("w1", "p3"),
    ]
    assert [a["pod_uid"] for a in ledger.attempts("a")] == ["p1", "p3", "p4"]
    assert [a["outcome"] for a in ledger.attempts()] == [
        "applied", "applied", "applied", "duplicate",
    ]  # fmt: skip
    assert ledger.attempts("nobody") == [] and ledger.deliveries("nobody") == []
    for listing in (ledger.attempts, ledger.deliveries):
        with pytest.raises(InvalidEvent) as refused:
            listing("not a case")
        assert refused.value.field == "case_id"


def test_concurrent_connections_for_one_key_make_one_delivery(target: Target) -> None:
    """32 threads, each with its own Ledger (its own connection), ask for one key at once."""
    clients = 32
    Ledger(target.ref).close()  # the schema exists before the race starts
    ledgers = [Ledger(target.ref) for _ in range(clients)]
    try:
        answers = at_once(
            ledgers,
            lambda i, own: own.request("race", "order-1", f"pod-{i}"),
            ready=lambda own: own.deliveries("warm-up"),  # connected before the barrier
        )
    finally:
        for own in ledgers:
            own.close()
    assert len({a["delivery_no"] for a in answers}) == 1
    assert sorted(a["duplicate"] for a in answers) == [False] + [True] * (clients - 1)
    assert sorted(a["attempt"] for a in answers) == list(range(1, clients + 1))
    assert count(target, "deliveries") == 1
    assert target.rows("SELECT COUNT(DISTINCT pod_uid), COUNT(*) FROM ackledger_attempts") == [
        (clients, clients)
    ]


def test_attempts_are_numbered_per_key_whatever_the_mode_and_outcome(
    ledger: Ledger, target: Target
) -> None:
    control = ledger.request("c", "w", "pod-1", mode="control")
    applied = ledger.request("c", "w", "pod-2", payload={"n": 1})
    duplicate = ledger.request("c", "w", "pod-3", payload={"n": 1})
    with pytest.raises(PayloadConflict) as refused:
        ledger.request("c", "w", "pod-4", payload={"n": 2})
    again = ledger.request("c", "w", "pod-5", mode="control")
    other = ledger.request("c", "other", "pod-6")
    assert [control["attempt"], applied["attempt"], duplicate["attempt"]] == [1, 2, 3]
    assert (refused.value.attempt, refused.value.delivery_no) == (4, applied["delivery_no"])
    assert again["attempt"] == 5 and again["duplicate"] is False
    assert other["attempt"] == 1
    assert len({control["delivery_no"], applied["delivery_no"], again["delivery_no"]}) == 3
    assert target.rows(
        "SELECT pod_uid, mode, outcome, delivery_no FROM ackledger_attempts WHERE work_id = 'w' "
        "ORDER BY attempt_no"
    ) == [
        ("pod-1", "control", "applied", control["delivery_no"]),
        ("pod-2", "idempotent", "applied", applied["delivery_no"]),
        ("pod-3", "idempotent", "duplicate", applied["delivery_no"]),
        ("pod-4", "idempotent", "conflict", None),
        ("pod-5", "control", "applied", again["delivery_no"]),
    ]


def test_counters_count_every_request_once_and_survive_purge(
    ledger: Ledger, target: Target
) -> None:
    ledger.request("c", "a", "pod", mode="control")
    ledger.request("c", "a", "pod")
    ledger.request("c", "a", "pod")
    with pytest.raises(PayloadConflict):
        ledger.request("c", "a", "pod", payload={"n": 1})
    ledger.request("c", "b", "pod")
    ledger.submit_many(
        [
            check_request("c", "b", "pod", "idempotent", None),
            check_request("c", "b", "pod", "idempotent", {"n": 2}),
            check_request("c", "d", "pod", "control", None),
        ]
    )
    counted = {"attempts": 8, "deliveries": 4, "duplicates": 2, "conflicts": 2}
    assert ledger.counters() == counted
    assert counted["attempts"] == count(target, "attempts")
    _age(target, "a", 40)
    _age(target, "b", 40)
    _age(target, "d", 40)
    assert ledger.purge() == {"deliveries": 4, "attempts": 8}
    assert ledger.counters() == counted  # purge forgets keys, not what happened
    ledger.request("c", "a", "pod")
    assert ledger.counters() == {**counted, "attempts": 9, "deliveries": 5}


def _age(target: Target, work_id: str, days: float) -> None:
    """Make a key's attempts look ``days`` older (a test-side write: time is not mocked)."""
    target.execute(
        "UPDATE ackledger_attempts SET at = at - ? WHERE work_id = ?", (days * DAY, work_id)
    )


def test_purge_forgets_idle_keys_whole_and_keeps_live_ones(ledger: Ledger, target: Target) -> None:
    old = ledger.request("c", "old", "pod-A")
    ledger.request("c", "old", "pod-B")
    live = ledger.request("c", "live", "pod-A")
    _age(target, "old", 31)
    _age(target, "live", 40)
    ledger.request("c", "live", "pod-B")  # asked for again: the key is live, all of it stays

    assert ledger.purge() == {"deliveries": 1, "attempts": 2}
    assert target.rows("SELECT work_id FROM ackledger_deliveries") == [("live",)]
    assert [a["pod_uid"] for a in ledger.attempts()] == ["pod-A", "pod-B"]
    again = ledger.request("c", "live", "pod-C")
    assert again == {
        "delivery_no": live["delivery_no"],
        "duplicate": True,
        "attempt": 3,
        "state": "in_progress",
    }

    # A purged key starts fresh: a new number (never an old one reused) and attempt 1.
    fresh = ledger.request("c", "old", "pod-D")
    assert fresh["duplicate"] is False and fresh["attempt"] == 1
    assert fresh["delivery_no"] > max(old["delivery_no"], live["delivery_no"])
    # The counters only grow: purge does not take back what happened.
    assert ledger.counters()["deliveries"] == 3


def test_purge_keeps_keys_inside_the_retention(ledger: Ledger, target: Target) -> None:
    ledger.request("c", "w", "pod-A", mode="control")
    ledger.request("c", "w", "pod-B")
    _age(target, "w", 29)
    assert DEFAULT_RETENTION_SECONDS == 30 * DAY
    assert ledger.purge() == {"deliveries": 0, "attempts": 0}
    assert ledger.purge(28 * DAY) == {"deliveries": 2, "attempts": 2}
    assert count(target, "deliveries") == 0


def test_purge_refuses_a_meaningless_age_and_writes_nothing(ledger: Ledger, target: Target) -> None:
    ledger.request("c", "w", "pod")
    _age(target, "w", 400)  # any purge that ran would remove it
    before = target.dump()
    meaningless: tuple[Any, ...] = (0, -1, float("nan"), float("inf"), "30d", True, None)
    for bad in meaningless:
        with pytest.raises(ValueError, match="older_than_seconds"):
            ledger.purge(bad)
    assert target.dump() == before


def test_schema_has_the_contract_names_and_a_partial_key_index(target: Target) -> None:
    Ledger(target.ref).close()
    assert target.rows("SELECT delivery_no, case_id, work_id FROM ackledger_deliveries") == []
    assert (
        target.rows("SELECT case_id, work_id, pod_uid, mode, delivery_no FROM ackledger_attempts")
        == []
    )
    insert = (
        "INSERT INTO ackledger_deliveries (case_id, work_id, mode, fingerprint, pod_uid, "
        "created_at) "
        "VALUES ('c', 'w', ?, 'f', 'p', 0)"
    )
    target.execute(insert, ("control",))
    target.execute(insert, ("control",))
    target.execute(insert, ("idempotent",))
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        target.execute(insert, ("idempotent",))
    assert target.rows(
        "SELECT mode, COUNT(*) FROM ackledger_deliveries GROUP BY mode ORDER BY mode"
    ) == [
        ("control", 2),
        ("idempotent", 1),
    ]


@pytest.mark.postgres
def test_requests_for_other_keys_do_not_wait_for_an_open_one_on_postgres(pg_url: str) -> None:
    """Replicas must not take turns: a request whose transaction is still open (it bumped its
    counters, it has not committed) does not hold up a request for another key on another
    connection. One counter row bumped by every request would make the second one wait."""
    from ackledger.ledger.ledger import record_request

    def shard(ledger: Ledger) -> int:
        with ledger.backend.read() as tx:
            return int(tx.scalar("SELECT pg_backend_pid()")) % COUNTER_SHARDS

    with Ledger(pg_url) as first:
        # Counter rows are chosen by server process: take a second connection whose row
        # differs (each new connection is a new server process; it takes a few tries at most).
        opened = [Ledger(pg_url)]
        while shard(opened[-1]) == shard(first):
            opened.append(Ledger(pg_url))
        second = opened[-1]
        answers: list[dict[str, Any]] = []
        with first.backend.write() as tx:
            held = record_request(tx, check_request("c", "held", "pod-A", "idempotent", None), 0)
            waiter = threading.Thread(
                target=lambda: answers.append(second.request("c", "other", "pod-B"))
            )
            waiter.start()
            waiter.join(timeout=60)
            assert len(answers) == 1, "a request waited for another key's open transaction"
        for ledger in opened:
            ledger.close()
        assert [(d["work_id"], d["delivery_no"]) for d in first.deliveries()] == [
            ("held", held.delivery_no),
            ("other", answers[0]["delivery_no"]),
        ]
        assert first.counters() == {"attempts": 2, "deliveries": 2, "duplicates": 0, "conflicts": 0}


def test_a_group_of_requests_shares_one_transaction_and_keeps_each_answer(
    ledger: Ledger, target: Target
) -> None:
    ledger.request("case-g", "old", "pod-0", payload={"n": 1})
    reqs = [
        check_request("case-g", "new", "pod-1", "idempotent", None),
        check_request("case-g", "new", "pod-2", "idempotent", None),  # same key, same group
        check_request("case-g", "old", "pod-3", "idempotent", {"n": 2}),  # another payload
        check_request("case-g", "ctl", "pod-4", "control", None),
    ]
    first, again, refused, control = ledger.submit_many(reqs)
    assert isinstance(first, dict) and first["duplicate"] is False and first["attempt"] == 1
    assert isinstance(again, dict)
    assert (again["delivery_no"], again["duplicate"], again["attempt"]) == (
        first["delivery_no"],
        True,
        2,
    )
    assert isinstance(refused, PayloadConflict) and refused.attempt == 2
    assert isinstance(control, dict) and control["duplicate"] is False
    outcomes = target.rows(
        "SELECT pod_uid, outcome FROM ackledger_attempts WHERE case_id = 'case-g' ORDER BY "
        "attempt_no"
    )
    assert outcomes == [
        ("pod-0", "applied"),
        ("pod-1", "applied"),
        ("pod-2", "duplicate"),
        ("pod-3", "conflict"),
        ("pod-4", "applied"),
    ]
    assert count(target, "deliveries") == 3


def test_a_purge_racing_requests_for_its_keys_never_breaks_a_key(target: Target) -> None:
    """A request for a key being purged either continues the key or starts it fresh, never an
    error nor a half of each (purge_race: many rounds, every interleaving checked)."""
    Ledger(target.ref).close()  # the schema exists before the race starts
    senders = {i: Ledger(target.ref) for i in range(1, purge_race.SENDERS + 1)}
    try:
        purge_race.run_rounds(
            target,
            lambda i, work_id: senders[i].request(purge_race.CASE, work_id, f"pod-{i}"),
            ready=lambda i: senders[i].deliveries("warm-up") if i else None,
        )
    finally:
        for own in senders.values():
            own.close()


def _wait_for_a_lock_wait(pg_url: str) -> None:
    """Until some session of this database waits for an advisory lock (no time is asserted)."""
    deadline = time.monotonic() + 60
    while not pg.rows(
        pg_url,
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )[0][0]:
        assert time.monotonic() < deadline, "nobody came to wait for the key"
        time.sleep(0.01)


@contextmanager
def _idle_key(pg_url: str) -> Iterator[tuple[Ledger, Ledger, dict[str, Any]]]:
    """Two ledgers (a requester's, a purger's) and the first answer of key ("c", "w"), whose
    attempt is then made 40 days old."""
    with Ledger(pg_url) as requester, Ledger(pg_url) as purger:
        first = requester.request("c", "w", "pod-A")
        _age(Target("postgres", pg_url), "w", 40)
        yield requester, purger, first


@pytest.mark.postgres
def test_a_purge_keeps_a_key_whose_request_is_in_flight_on_postgres(pg_url: str) -> None:
    """The request has the key (its transaction open): the purge does not wait for it and does
    not touch the key, which then continues with the next attempt number."""
    from ackledger.ledger.ledger import record_request

    with _idle_key(pg_url) as (requester, purger, first):
        purged: list[dict[str, int]] = []
        with requester.backend.write() as tx:
            held = record_request(tx, check_request("c", "w", "pod-B", "idempotent", None), 0)
            purging = threading.Thread(target=lambda: purged.append(purger.purge()))
            purging.start()
            purging.join(timeout=60)
            # Before the fix the purge deleted the key's attempts, then waited here for the
            # request's lock on the delivery, and failed on the foreign key after its commit.
            assert not purging.is_alive(), "the purge waits for an open request"
        assert purged == [{"deliveries": 0, "attempts": 0}]
        assert (held.delivery_no, held.attempt) == (first["delivery_no"], 2)
        assert requester.request("c", "w", "pod-C")["attempt"] == 3


@pytest.mark.postgres
def test_a_request_for_a_key_being_purged_waits_and_starts_it_fresh_on_postgres(
    pg_url: str,
) -> None:
    """The purge has the key (its chunk's transaction open): a request for it waits for the
    purge's commit, then finds no key and starts it afresh."""
    with _idle_key(pg_url) as (requester, purger, old):
        answers: list[dict[str, Any]] = []
        with purger.backend.write() as tx:
            cutoff = time.time() - DEFAULT_RETENTION_SECONDS
            assert tx.ledger_purge_idle_chunk(cutoff, ("", "")) == (1, 1, ("c", "w"))
            asking = threading.Thread(
                target=lambda: answers.append(requester.request("c", "w", "pod-B"))
            )
            asking.start()
            _wait_for_a_lock_wait(pg_url)
        asking.join(timeout=60)
        assert len(answers) == 1
        (fresh,) = answers
        assert fresh["delivery_no"] > old["delivery_no"]
        assert (fresh["duplicate"], fresh["attempt"]) == (False, 1)
        assert pg.rows(pg_url, "SELECT delivery_no, pod_uid FROM ackledger_attempts") == [
            (fresh["delivery_no"], "pod-B")
        ]


def test_purge_works_through_many_keys_in_chunks(target: Target) -> None:
    """More idle keys than one chunk holds, live keys between them: every idle key goes, in
    several transactions (on SQLite too: the one writer is free between chunks), and every
    live one stays whole."""
    keys = PURGE_CHUNK * 2 + 7
    with Ledger(target.ref) as ledger:
        ledger.submit_many(
            [check_request("c", f"k{n:05}", "pod", "idempotent", None) for n in range(keys)]
        )
        target.execute(
            "UPDATE ackledger_attempts SET at = at - ? WHERE work_id NOT LIKE ?", (40 * DAY, "%3")
        )
        live = sum(1 for n in range(keys) if n % 10 == 3)
        assert ledger.purge() == {"deliveries": keys - live, "attempts": keys - live}
        kept = target.rows("SELECT work_id FROM ackledger_deliveries ORDER BY work_id")
        assert kept == [(f"k{n:05}",) for n in range(keys) if n % 10 == 3]
        assert count(target, "attempts") == live


def test_a_sqlite_purge_chunk_takes_whole_keys_after_its_cursor(tmp_path: Any) -> None:
    path = tmp_path / "l.db"
    with Ledger(path) as ledger:
        for work_id in ("a", "b", "c"):
            ledger.request("c", work_id, "pod-1")
            ledger.request("c", work_id, "pod-2", mode="control")
        target = Target("sqlite", str(path))
        target.execute("UPDATE ackledger_attempts SET at = at - ?", (40 * DAY,))
        cutoff = time.time() - DEFAULT_RETENTION_SECONDS
        with ledger.backend.write() as tx:
            first = tx.ledger_purge_idle_chunk(cutoff, ("", ""), 2)
        assert first == (4, 4, ("c", "b"))  # two keys, each with both its deliveries
        with ledger.backend.write() as tx:
            assert tx.ledger_purge_idle_chunk(cutoff, ("c", "b"), 2) == (
                2, 2, ("c", "c"),
            )  # fmt: skip
            assert tx.ledger_purge_idle_chunk(cutoff, ("c", "c"), 2) == (
                0, 0, None,
            )  # fmt: skip
    assert count(target, "deliveries") == count(target, "attempts") == 0
