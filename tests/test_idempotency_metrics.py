"""The idempotency keys' metrics after real requests and calls: the middleware in front of a
real Starlette app and ``@ledger.idempotent`` count into their ledger, which the ledger's
``/metrics`` serves, and so does the collector the middleware hands to an app's own registry."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ackledger import InFlight
from ackledger.errors import Conflict
from ackledger.ledger.app import create_ledger_app
from tests.idempotency_app import EFFECTS, build
from tests.inprocess import InProcess

DATABASE = (("scope", "database"),)


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("ackledger_idempotency_")
    }


def _post(app: InProcess, path: str, key: str, body: dict[str, Any]) -> int:
    headers = {"Idempotency-Key": f'"{key}"', "Content-Type": "application/json"}
    return app.send("POST", path, json.dumps(body).encode(), headers).status_code


def test_the_keys_metrics_count_what_requests_and_calls_did(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute(EFFECTS)
    middleware = build(str(db))
    ledger = middleware.ledger
    try:
        with InProcess(middleware) as shop:
            assert _post(shop, "/orders", "a", {"sku": "tea"}) == 201  # claimed, completed
            assert _post(shop, "/orders", "a", {"sku": "tea"}) == 201  # replayed
            assert _post(shop, "/orders", "a", {"sku": "jam"}) == 422  # conflict
            assert _post(shop, "/unavailable", "u", {}) == 503  # claimed, released

        @ledger.idempotent(key=lambda n: f"price-{n}")
        def price(n: int) -> dict[str, int]:
            return {"cents": n * 100}

        @ledger.idempotent(key=lambda n: f"again-{n}")
        def reenter(n: int) -> dict[str, int]:
            with pytest.raises(InFlight):  # the same key while this call holds it
                reenter(n)
            return {"n": n}

        assert price(3) == price(3) == {"cents": 300}  # claimed and completed, then replayed
        assert reenter(1) == {"n": 1}  # claimed, one refusal, completed

        @ledger.idempotent(key=lambda sku, qty: f"order-{sku}")
        def order(sku: str, qty: int) -> dict[str, int]:
            return {"qty": qty}

        assert order("tea", 1) == {"qty": 1}  # claimed, completed
        with pytest.raises(Conflict):
            order("tea", 2)

        expected = {
            ("ackledger_idempotency_claims_total", ()): 5,
            ("ackledger_idempotency_replays_total", ()): 2,
            ("ackledger_idempotency_in_flight_refusals_total", ()): 1,
            ("ackledger_idempotency_conflicts_total", ()): 2,
            ("ackledger_idempotency_completions_total", ()): 4,
            ("ackledger_idempotency_keys_in_progress", DATABASE): 0,
            ("ackledger_idempotency_keys_completed", DATABASE): 4,
        }
        with InProcess(create_ledger_app(ledger)) as service:
            status, _, scraped = service.request("GET", "/metrics")
        assert status == 200
        assert _values(scraped.decode()) == expected
        registry = CollectorRegistry()  # an app's own /metrics, with the middleware's collector
        registry.register(middleware.metrics_collector())
        assert _values(generate_latest(registry).decode()) == expected
    finally:
        middleware.close()
