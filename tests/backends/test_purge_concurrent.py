"""Two purges of one PostgreSQL outbox at once (two replicas' cron jobs): the rows are
deleted once, and counted once (found by review: both used to add every row to the
durable totals, doubling `sent` and `attempts`)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from ackledger import Outbox

pytestmark = pytest.mark.slow


def test_overlapping_purges_count_each_row_once(pg_url: str) -> None:
    with Outbox(pg_url) as outbox:
        for n in range(10):
            outbox.accept({"id": f"p-{n}", "sku": "pen", "qty": 1})
            outbox.mark_sent(f"p-{n}", attempted=True)
    # One row locked by another transaction: both purges reach it, wait, and go on together.
    blocker = psycopg.connect(pg_url)
    blocker.execute("SELECT 1 FROM ackledger_outbox WHERE id = 'p-0' FOR UPDATE")
    results: list[int] = []

    def purge() -> None:
        with Outbox(pg_url) as outbox:
            results.append(outbox.purge(0))

    threads = [threading.Thread(target=purge) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # both DELETEs are waiting on the locked row now
    blocker.commit()
    blocker.close()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == [0, 10]
    with Outbox(pg_url) as outbox:
        stats = outbox.stats()
    assert (stats["sent"], stats["attempts"], stats["purged"]) == (10, 10, 10)
