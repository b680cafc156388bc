"""Batch delivery at a real sink's /events/batch: the answer names the refused item, and
duplicates inside and across batches are absorbed. The source side (dispatch_batch over an
Outbox on every backend) is in tests/backends/test_batch_delivery.py.

Every check reads the sink's database from a separate connection (``raw_rows``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ackledger.ops.processes import Service
from ackledger.wire.http import close_connections, post_batch

from .batchhelp import batch_url, pairs, sender, stock
from .conftest import raw_rows
from .events import lab

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _fresh_connections() -> Any:
    yield
    close_connections()


def test_the_batch_answer_names_the_failing_item(sink_service: Service) -> None:
    url = batch_url(sink_service)
    assert post_batch([lab("p1", "sku-1", 5)], url).acked == 1
    answer = post_batch([lab("p2", "sku-1", 1), lab("p1", "sku-1", 6), lab("p3", "sku-1", 1)], url)
    assert answer.acked == 1
    assert answer.error is not None
    assert answer.error["status"] == 422
    assert answer.error["index"] == 1


def test_duplicates_inside_and_across_batches_are_absorbed(
    sink_db: Path, sink_service: Service
) -> None:
    send = sender(sink_service)
    # Inside one batch: the second "d1" is a duplicate of the first, acknowledged, not applied.
    assert send([lab("d1", "sku-d", 3), lab("d2", "sku-d", 4), lab("d1", "sku-d", 3)]) == 3
    # Across batches: the whole batch again.
    assert send([lab("d1", "sku-d", 3), lab("d2", "sku-d", 4)]) == 2
    assert stock(sink_db, "sku-d") == 7
    receipts = pairs(raw_rows(sink_db, "SELECT id, receipts FROM ackledger_inbox"))
    assert receipts == {"d1": 3, "d2": 2}
    counters = pairs(raw_rows(sink_db, "SELECT name, value FROM ackledger_counters"))
    assert counters["sink.applied"] == 2
    assert counters["sink.duplicate"] == 3
