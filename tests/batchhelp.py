"""Helpers for the batch delivery tests: events, a sender to a real sink, the sink's stock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ackledger.ops.processes import Service
from ackledger.wire.http import send_http_batch
from tests.conftest import raw_rows


def pairs(rows: list[tuple[object, ...]]) -> dict[object, object]:
    return {row[0]: row[1] for row in rows}


def event(event_id: str, sku: str = "sku-1", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


def batch_url(service: Service) -> str:
    return service.base_url + "/events/batch"


def sender(service: Service) -> Any:
    url = batch_url(service)

    def send_batch(events: list[dict[str, Any]]) -> int:
        return send_http_batch(events, url)

    return send_batch


def stock(sink: Path, sku: str) -> int:
    rows = raw_rows(sink, "SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return int(str(rows[0][0])) if rows else 0
