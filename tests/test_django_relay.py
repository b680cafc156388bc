"""Two Django projects, one relay: the shop's orders (project A) reach the warehouse (project
B, the same test project on another database), whose handler saves a ``Shipment`` model in
the receipt's transaction. ``manage.py ackledger relay`` of A sends to B's ``events`` view
(one by one, or ``--batch``) served by ``manage.py runserver``; B is killed with SIGKILL
mid-way and started again; every order is shipped exactly once, and a re-send is a
duplicate."""

from __future__ import annotations

import json
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .djangohelp import KINDS, Project, free_port, pair_on
from .opshelp import wait_until

pytestmark = pytest.mark.slow

ORDERS = 40


@pytest.fixture(params=KINDS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Project, Project]]:
    yield from pair_on(request.param, tmp_path)


@pytest.mark.parametrize("batch", [False, True], ids=["one-by-one", "batch"])
def test_every_order_is_shipped_once_across_a_kill_of_the_sink(
    pair: tuple[Project, Project], batch: bool
) -> None:
    shop, warehouse = pair
    shop.manage("migrate")
    warehouse.manage("migrate")
    shop.place_orders(ORDERS)
    port = free_port()
    server = warehouse.runserver(port)
    relay = shop.start(
        "ackledger", "relay", "--to", f"http://127.0.0.1:{port}/events", "--max-backoff", "0.5",
        *(["--batch"] if batch else []),
    )  # fmt: skip
    try:

        def shipped() -> int:
            return int(warehouse.rows("SELECT count(*) FROM shop_shipment")[0][0])

        wait_until(lambda: shipped() >= 5, "five shipments")
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        killed_at = shipped()
        assert killed_at < ORDERS, "the kill came too late to prove anything"
        server = warehouse.runserver(port)
        wait_until(
            lambda: shop.rows("SELECT count(*) FROM ackledger_outbox WHERE sent = 0")[0][0] == 0,
            "the outbox all sent",
            timeout=90,
        )
        relay.send_signal(signal.SIGTERM)
        out, _ = relay.communicate(timeout=30)
        assert relay.returncode == 0, out

        numbers = [row[0] for row in warehouse.rows("SELECT order_number FROM shop_shipment")]
        assert sorted(numbers, key=int) == [str(number) for number in range(ORDERS)]
        assert warehouse.rows("SELECT count(*) FROM ackledger_inbox") == [(ORDERS,)]

        # A re-send of a shipped order is acknowledged again and applied never again.
        event = json.loads(
            shop.rows("SELECT event FROM ackledger_outbox WHERE id = 'order-3'")[0][0]
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/events",
            data=json.dumps(event).encode(),
            headers={"Content-Type": "application/cloudevents+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            assert answer.headers["Idempotent-Replayed"] == "true"
            assert json.loads(answer.read())["status"] == "duplicate"
        assert warehouse.rows("SELECT count(*) FROM shop_shipment") == [(ORDERS,)]
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
        server.kill()
        server.wait()
