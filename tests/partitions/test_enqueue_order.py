"""PostgreSQL hands out seq at insert, not at commit: enqueues into one partition must still
become visible in seq order, or a relay could send seq 7 before seq 6 of the same partition."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from ackledger import Outbox
from ackledger.relay.partitions import PartitionLeases

from .. import pg
from ..events import lab

pytestmark = pytest.mark.postgres


def waiting_on_advisory_lock(url: str) -> bool:
    rows = pg.rows(
        url,
        "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()",
    )
    return int(rows[0][0]) > 0


def until_it_waits(url: str, thread: threading.Thread) -> None:
    """Return once ``thread`` waits for an advisory lock (failing if it ends or never does)."""
    deadline = time.monotonic() + 60
    while not waiting_on_advisory_lock(url):
        assert time.monotonic() < deadline and thread.is_alive(), "it did not wait"
        time.sleep(0.02)


def test_a_later_enqueue_into_the_same_partition_waits_for_the_earlier_commit(
    pg_url: str,
) -> None:
    first_open = threading.Event()
    let_first_commit = threading.Event()
    seqs: dict[str, int] = {}

    def first() -> None:
        with Outbox(pg_url) as ob, ob.transaction() as tx:
            seqs["first"] = tx.enqueue(lab("first", "p", 1))
            first_open.set()
            let_first_commit.wait(timeout=60)

    def second() -> None:
        with Outbox(pg_url) as ob, ob.transaction() as tx:
            seqs["second"] = tx.enqueue(lab("second", "p", 1))

    with Outbox(pg_url) as ob:
        one = threading.Thread(target=first)
        one.start()
        assert first_open.wait(timeout=60)
        two = threading.Thread(target=second)
        two.start()
        until_it_waits(pg_url, two)
        # While the first is open, the second has not even taken its seq, so a relay sees
        # neither: never the later one alone.
        assert "second" not in seqs
        assert PartitionLeases(ob, "observer").pending_in_partition("p") == []
        let_first_commit.set()
        one.join(timeout=60)
        two.join(timeout=60)
        items = PartitionLeases(ob, "observer").pending_in_partition("p")
    assert [item["id"] for item in items] == ["first", "second"]
    assert seqs["first"] < seqs["second"]


@pytest.mark.parametrize("using", [False, True], ids=["own", "using"])
def test_an_enqueue_that_waited_for_its_partition_draws_its_seq_after_the_wait(
    pg_url: str, using: bool
) -> None:
    # The partition's lock and the claim are one statement: the seq must still be drawn
    # only once the lock is held, so an event of another partition published during the
    # wait gets the lower seq.
    from ackledger.store.postgres import queries

    holder = psycopg.connect(pg_url)
    caller = psycopg.connect(pg_url)
    seqs: dict[str, int] = {}
    try:
        holder.execute(
            queries.LOCK_PARTITION.replace("?", "%s"), (queries.PARTITION_LOCK_CLASS, "p")
        )
        with Outbox(pg_url) as ob:

            def waiting() -> None:
                if using:
                    seqs["waited"] = ob.publish(lab("waited", "p", 1), using=caller)
                    caller.commit()
                else:
                    seqs["waited"] = ob.publish(lab("waited", "p", 1))

            one = threading.Thread(target=waiting)
            one.start()
            until_it_waits(pg_url, one)
            seqs["meanwhile"] = ob.publish(lab("meanwhile", "q", 1))
            holder.rollback()
            one.join(timeout=60)
    finally:
        holder.close()
        caller.close()
    assert seqs["meanwhile"] < seqs["waited"]
