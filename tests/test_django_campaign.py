"""The seeded kill -9 campaign across two Django projects: ``manage.py ackledger relay`` of the
shop (project A) sends its orders to ``manage.py ackledger serve sink`` of the warehouse
(project B, the same test project on another database), whose handler from
``ACKLEDGER["HANDLERS"]`` saves a ``Shipment`` model in the receipt's transaction.

The seed alone draws which process is killed with SIGKILL and when (once B has shipped a
drawn number of orders, after a drawn delay); each is started again after its kill. At the
end every order is shipped exactly once: B's shipments are the orders, each once, B's
receipts are the orders, and A's outbox is all sent. Both databases are read from the test's
own connections; a failure names its seed and the processes' logs.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ackledger.ops.processes import Service

from .djangohelp import Project, free_port, pair_on
from .opshelp import wait_until

pytestmark = pytest.mark.slow

ORDERS = 60
KILLS = 8
TARGETS = ("relay", "sink")
#: How long B's handler holds each receipt's transaction open: the campaign lasts a few
#: seconds, and a kill often lands inside a transaction.
SHIP_SECONDS = 0.05


@dataclass(frozen=True)
class Kill:
    target: str
    after_shipped: int
    delay_s: float


def schedule(seed: int) -> list[Kill]:
    """``KILLS`` kills at rising numbers of shipped orders; each target at least once."""
    rng = random.Random(seed)
    targets = [*TARGETS, *(rng.choice(TARGETS) for _ in range(KILLS - len(TARGETS)))]
    rng.shuffle(targets)
    marks = sorted(rng.sample(range(1, ORDERS - KILLS), KILLS))
    return [
        Kill(target, mark, round(rng.uniform(0, 0.15), 3))
        for target, mark in zip(targets, marks, strict=True)
    ]


def test_a_schedule_is_drawn_from_its_seed_alone() -> None:
    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)
    for seed in range(20):
        kills = schedule(seed)
        assert len(kills) == KILLS and {kill.target for kill in kills} == set(TARGETS)
        marks = [kill.after_shipped for kill in kills]
        assert marks == sorted(marks) and marks[-1] < ORDERS


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Project, Project]]:
    for shop, warehouse in pair_on(request.param, tmp_path):
        shop.manage("migrate")
        warehouse.manage("migrate")
        yield shop, warehouse


class Campaign:
    """The relay of A and the sink of B as real processes, each restartable after a kill."""

    def __init__(self, shop: Project, warehouse: Project, logs: Path) -> None:
        self.shop, self.warehouse, self.logs = shop, warehouse, logs
        self.port = free_port()
        self.sink: Service = self.start_sink()
        self.relay: subprocess.Popen[str] = self.start_relay()

    def start_sink(self) -> Service:
        return self.warehouse.serve_sink(
            self.port, self.logs / "sink.log", {"SHOP_SHIP_SECONDS": str(SHIP_SECONDS)}
        )

    def start_relay(self) -> subprocess.Popen[str]:
        # On PostgreSQL a killed relay's partition leases wait out their time to live before
        # the restarted one may claim them: a short one keeps the campaign short.
        leases = ["--lease-ttl", "2", "--timeout", "1"] if self.shop.is_postgres else []
        return self.shop.start(
            "ackledger", "relay", "--to", f"http://127.0.0.1:{self.port}/events",
            "--base-backoff", "0.05", "--max-backoff", "0.3", "--poll-interval", "0.05",
            *leases, log=self.logs / "relay.log",
        )  # fmt: skip

    def kill(self, target: str) -> None:
        """SIGKILL (no handler, no finally), then the same command started again."""
        if target == "relay":
            self.relay.kill()
            self.relay.wait()
            self.relay = self.start_relay()
        else:
            self.sink.stop(signal.SIGKILL)
            self.sink = self.start_sink()

    def shipped(self) -> int:
        return int(self.warehouse.rows("SELECT count(*) FROM shop_shipment")[0][0])

    def unsent(self) -> int:
        return int(self.shop.rows("SELECT count(*) FROM ackledger_outbox WHERE sent = 0")[0][0])

    def close(self) -> None:
        if self.relay.poll() is None:
            self.relay.kill()
            self.relay.wait()
        self.sink.stop()


# Two schedules on SQLite, one on PostgreSQL (its databases take longer to make and drop).
@pytest.mark.parametrize(
    ("pair", "seed"),
    [("sqlite", 1), ("sqlite", 2), pytest.param("postgres", 3, marks=pytest.mark.postgres)],
    indirect=["pair"],
)
def test_relay_and_sink_killed_at_random_ship_every_order_once(
    pair: tuple[Project, Project], tmp_path: Path, seed: int
) -> None:
    shop, warehouse = pair
    shop.place_orders(ORDERS)
    kills = schedule(seed)
    campaign = Campaign(shop, warehouse, tmp_path)
    try:
        unsent_at_kill = []
        for kill in kills:
            wait_until(lambda: campaign.shipped() >= kill.after_shipped, f"{kill}")  # noqa: B023
            time.sleep(kill.delay_s)
            unsent_at_kill.append(campaign.unsent())
            campaign.kill(kill.target)
        wait_until(lambda: campaign.unsent() == 0, "A's outbox all sent")
        campaign.relay.send_signal(signal.SIGTERM)
        assert campaign.relay.wait(30) == 0
        assert campaign.sink.stop() == 0

        # Every kill came while orders were still to send: each one could have lost or
        # doubled something.
        assert all(unsent_at_kill), unsent_at_kill
        numbers = [row[0] for row in warehouse.rows("SELECT order_number FROM shop_shipment")]
        assert sorted(numbers, key=int) == [str(number) for number in range(ORDERS)]
        inbox = warehouse.rows("SELECT id FROM ackledger_inbox WHERE source = '/shop'")
        assert sorted(row[0] for row in inbox) == sorted(
            row[0] for row in shop.rows("SELECT id FROM ackledger_outbox")
        )
        assert len(inbox) == ORDERS
        assert shop.rows("SELECT count(*) FROM ackledger_outbox WHERE sent = 0") == [(0,)]
    except AssertionError as error:
        logs = {name: (tmp_path / name).read_text(errors="replace")[-2000:]
                for name in ("relay.log", "sink.log") if (tmp_path / name).exists()}  # fmt: skip
        raise AssertionError(f"seed {seed}, kills {kills}: {error}\n{logs}") from error
    finally:
        campaign.close()
