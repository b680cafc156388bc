"""Idempotency keys past their ttl: ``Ledger.purge_keys`` and ``ackledger ledger purge`` delete
them (in chunks), keep live ones, and the counts say what is left; on both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ackledger import Ledger
from ackledger._dev.procs import run_cli
from ackledger.store.idempotency_keys import PURGE_CHUNK, claim_key, complete_key

from .conftest import Target


@pytest.fixture
def ledger(target: Target) -> Iterator[Ledger]:
    with Ledger(target.ref) as opened:
        yield opened


def _keys(target: Target) -> list[str]:
    return [
        row[0] for row in target.rows("SELECT key FROM ackledger_idempotency_keys ORDER BY key")
    ]


def test_purge_keys_deletes_expired_ones_only(ledger: Ledger, target: Target) -> None:
    @ledger.idempotent(key=lambda name: name, ttl="1h")
    def work(name: str) -> str:
        return name

    for name in ("old", "fresh"):
        work(name)
    target.execute("UPDATE ackledger_idempotency_keys SET expires_at = 0 WHERE key = 'old'")
    assert ledger.key_counts() == {"in_progress": 0, "completed": 2}
    assert ledger.purge_keys() == 1
    assert _keys(target) == ["fresh"]
    assert ledger.purge_keys() == 0


def test_purge_keys_goes_through_every_chunk(ledger: Ledger, target: Target) -> None:
    count = PURGE_CHUNK + 7
    now = time.time()
    with ledger.backend.write() as tx:
        for n in range(count):
            claim_key(tx, "s", f"k{n:04}", "fp", token="t", now=now - 7200, lease=1, ttl=3600)
            complete_key(tx, "s", f"k{n:04}", "t", result="1", body=None, now=now - 7200)
        # Expired, but its holder is alive: kept.
        claim_key(tx, "s", "live", "fp", token="t", now=now - 7200, lease=7300, ttl=3600)
    assert ledger.key_counts() == {"in_progress": 1, "completed": count}
    assert ledger.purge_keys() == count
    assert _keys(target) == ["live"]


def test_the_purge_command_deletes_expired_keys(ledger: Ledger, target: Target) -> None:
    @ledger.idempotent(key=lambda: "k", ttl="1h")
    def work() -> int:
        return 1

    work()
    kept = run_cli("ledger", "purge", "--db", target.ref)
    assert kept.returncode == 0, kept.stderr
    assert "and 0 expired idempotency keys" in kept.stdout
    target.execute("UPDATE ackledger_idempotency_keys SET expires_at = 0")
    done = run_cli("ledger", "purge", "--db", target.ref)
    assert done.returncode == 0, done.stderr
    assert "and 1 expired idempotency keys" in done.stdout
    assert _keys(target) == []
