"""The idempotency keys' store operations on both databases: claim, in flight, conflict,
complete and replay, release, lease takeover, expiry and purge. Read back through the test's
own connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ackledger.store import Backend, open_backend
from ackledger.store.idempotency_keys import (
    Found,
    KeyClaim,
    claim_key,
    complete_key,
    count_keys,
    purge_expired_keys,
    release_key,
    renew_key,
)

from .conftest import Target

NOW = 1_000_000.0
LEASE = 30.0
TTL = 3600.0


@pytest.fixture
def backend(target: Target) -> Iterator[Backend]:
    opened = open_backend(target.ref)
    yield opened
    opened.close()


def _claim(
    backend: Backend, key: str, fp: str = "fp", holder: str = "t1", now: float = NOW
) -> KeyClaim:
    with backend.write() as tx:
        return claim_key(tx, "s", key, fp, token=holder, now=now, lease=LEASE, ttl=TTL)


def _rows(target: Target) -> list[tuple[object, ...]]:
    return target.rows(
        "SELECT scope, key, fingerprint, state, lease_token, lease_expires_at, result, "
        "created_at, expires_at FROM ackledger_idempotency_keys ORDER BY key"
    )


def test_claim_then_in_flight_then_conflict(backend: Backend, target: Target) -> None:
    assert _claim(backend, "k").found is Found.CLAIMED
    assert _rows(target) == [
        ("s", "k", "fp", "in_progress", "t1", NOW + LEASE, None, NOW, NOW + TTL)
    ]
    again = _claim(backend, "k", holder="t2", now=NOW + 1)
    assert again.found is Found.IN_FLIGHT
    assert again.lease_expires_at == NOW + LEASE
    assert _claim(backend, "k", fp="other", holder="t3").found is Found.CONFLICT
    # Neither refused claim changed the holder.
    assert _rows(target)[0][4] == "t1"


def test_complete_then_replay(backend: Backend, target: Target) -> None:
    _claim(backend, "k")
    with backend.write() as tx:
        assert not complete_key(tx, "s", "k", "wrong", result="1", body=None, now=NOW)
        assert complete_key(tx, "s", "k", "t1", result='{"a":1}', body=b"\x00\xff", now=NOW + 2)
        # Completed once: a second completion changes nothing.
        assert not complete_key(tx, "s", "k", "t1", result="2", body=None, now=NOW + 3)
    found = _claim(backend, "k", holder="t2", now=NOW + 5)
    assert found.found is Found.COMPLETED
    assert (found.result, found.body) == ('{"a":1}', b"\x00\xff")
    assert _claim(backend, "k", fp="other", holder="t3").found is Found.CONFLICT
    row = _rows(target)[0]
    assert row[3:7] == ("completed", None, None, '{"a":1}')


def test_release_frees_the_key(backend: Backend, target: Target) -> None:
    _claim(backend, "k")
    with backend.write() as tx:
        assert not release_key(tx, "s", "k", "wrong")
        assert release_key(tx, "s", "k", "t1")
    assert _rows(target) == []
    # Free again, for another call too.
    assert _claim(backend, "k", fp="other", holder="t2").found is Found.CLAIMED


def test_a_dead_holder_is_taken_over_after_its_lease(backend: Backend, target: Target) -> None:
    _claim(backend, "k")
    with backend.write() as tx:
        assert renew_key(tx, "s", "k", "t1", NOW + 100)
        assert not renew_key(tx, "s", "k", "other", NOW + 500)
    assert _claim(backend, "k", holder="t2", now=NOW + 99).found is Found.IN_FLIGHT
    # Past the lease: the same call takes it over, another call is still a conflict.
    assert _claim(backend, "k", fp="other", holder="t3", now=NOW + 100).found is Found.CONFLICT
    assert _claim(backend, "k", holder="t2", now=NOW + 100).found is Found.CLAIMED
    assert _rows(target)[0][4] == "t2"
    with backend.write() as tx:
        # The old holder may no longer renew, complete or release it.
        assert not renew_key(tx, "s", "k", "t1", NOW + 1000)
        assert not complete_key(tx, "s", "k", "t1", result="1", body=None, now=NOW + 101)
        assert not release_key(tx, "s", "k", "t1")


def test_expired_keys_start_fresh_and_are_purged(backend: Backend, target: Target) -> None:
    _claim(backend, "done")
    _claim(backend, "running")
    with backend.write() as tx:
        complete_key(tx, "s", "done", "t1", result="1", body=None, now=NOW)
        assert count_keys(tx) == {"in_progress": 1, "completed": 1}
        # Before expiry, nothing goes.
        assert purge_expired_keys(tx, NOW + TTL - 1) == 0
        # A holder whose lease is live keeps its key even past the ttl.
        renew_key(tx, "s", "running", "t1", NOW + TTL + 10)
        assert purge_expired_keys(tx, NOW + TTL) == 1
    assert [row[1] for row in _rows(target)] == ["running"]
    _claim(backend, "done", fp="new", holder="t9", now=NOW + TTL)
    assert _rows(target)[0][1:5] == ("done", "new", "in_progress", "t9")
    with backend.write() as tx:
        assert purge_expired_keys(tx, NOW + TTL + 10, limit=1) == 1
        assert purge_expired_keys(tx, NOW + 2 * TTL) == 1
    assert _rows(target) == []


def test_an_expired_completed_key_is_claimed_for_another_call(backend: Backend) -> None:
    _claim(backend, "k")
    with backend.write() as tx:
        complete_key(tx, "s", "k", "t1", result="1", body=None, now=NOW)
    assert _claim(backend, "k", fp="other", holder="t2", now=NOW + TTL).found is Found.CLAIMED


def test_scopes_are_separate(backend: Backend) -> None:
    _claim(backend, "k")
    with backend.write() as tx:
        found = claim_key(tx, "t", "k", "fp2", token="x", now=NOW, lease=LEASE, ttl=TTL)
    assert found.found is Found.CLAIMED


def test_of_many_takeovers_of_a_dead_key_one_wins(backend: Backend, target: Target) -> None:
    _claim(backend, "k")
    racers = 8
    opened = [open_backend(target.ref) for _ in range(racers)]
    barrier = threading.Barrier(racers)

    def take(i: int) -> Found:
        barrier.wait()
        with opened[i].write() as tx:
            found = claim_key(
                tx, "s", "k", "fp", token=f"r{i}", now=NOW + LEASE, lease=LEASE, ttl=TTL
            )
        return found.found

    try:
        with ThreadPoolExecutor(racers) as pool:
            outcomes = list(pool.map(take, range(racers)))
    finally:
        for each in opened:
            each.close()
    assert sorted(o.value for o in outcomes) == ["claimed"] + ["in_flight"] * (racers - 1)
    winner = outcomes.index(Found.CLAIMED)
    assert _rows(target)[0][4] == f"r{winner}"
