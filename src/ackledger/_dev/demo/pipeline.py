"""Demo chapters of the source -> relay -> sink pipeline (seed 000)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...ops.faultproxy import FaultProxy
from ...ops.processes import run_cli, start_service
from ...sink.inbox import Inbox
from ...source.outbox import Outbox
from .story import Story

ORDERS: tuple[dict[str, Any], ...] = (
    {"id": "snack-7", "sku": "snack", "qty": 7},
    {"id": "a-pen-2", "sku": "pen", "qty": 2},
    {"id": "m-tea-5", "sku": "tea", "qty": 5},
)


def _outbox_row(source: Path, event_id: str) -> dict[str, object]:
    # A fresh Outbox is a new connection: we observe what is on disk, not what a process thinks.
    with Outbox(source) as outbox:
        return outbox.event(event_id) or {}


def _receipt(sink: Path, event_id: str) -> dict[str, object]:
    with Inbox(sink) as inbox:
        return inbox.receipt(event_id) or {}


def _stock(sink: Path, sku: str) -> int:
    with Inbox(sink) as inbox:
        return inbox.stock(sku)


def crash_after_ack(story: Story, workdir: Path) -> None:
    source, sink = workdir / "source.db", workdir / "sink.db"
    story.chapter(
        "A relay dies right after the ACK",
        """The relay marks an event sent only after the sink's exact ACK. If it dies between
        the ACK and the mark, the event is still pending and will be sent again; the sink's
        inbox must absorb that re-send.""",
    )
    story.step("Start the sink service as its own process (sink.db).")
    with start_service(["serve", "sink", "--db", str(sink), "--port", "0"]) as service:
        url = service.base_url + "/events"
        story.say(f"sink listening on {url}")

        story.step("Accept three orders; each order and its event commit in one transaction.")
        for order in ORDERS:
            done = run_cli("accept", "--source", str(source), stdin=json.dumps(order))
            story.say(f"accepted {order['id']} -> seq {done.stdout.strip()}")
        listed = run_cli("pending", "--source", str(source), "--json")
        order_ids = [item["id"] for item in json.loads(listed.stdout)]
        story.check(
            "pending lists the events in acceptance order, not id order",
            order_ids == [o["id"] for o in ORDERS],
            f"pending ids {order_ids}",
        )

        story.step("Run dispatch in a child process that exits with os._exit(73) after the ACK.")
        crashed = run_cli(
            "dispatch", "--source", str(source), "--to", url, "--exit-after-ack", "73"
        )  # fmt: skip
        story.check(
            "the relay process really died at that point",
            crashed.returncode == 73,
            f"exit status {crashed.returncode}",
        )

        story.step("Read both databases through new connections.")
        row = _outbox_row(source, "snack-7")
        story.check(
            "the source still says snack-7 is pending (sent = 0)",
            row.get("sent") == 0,
            f"outbox row sent={row.get('sent')}",
        )
        stock = _stock(sink, "snack")
        story.check(
            "the sink already holds the stock (snack = 7)", stock == 7, f"inventory snack={stock}"
        )
        story.say("Both are true at once: the ACK was seen, the mark was never saved.")

        story.step("Run dispatch again in a new process; it re-sends snack-7 with the same id.")
        again = run_cli("dispatch", "--source", str(source), "--to", url)
        story.check(
            "the second dispatch finished",
            again.returncode == 0,
            again.stdout.strip().splitlines()[-1] if again.stdout.strip() else "(no output)",
        )
        receipt = _receipt(sink, "snack-7")
        story.check(
            "the sink saw two requests for snack-7",
            receipt.get("receipts") == 2,
            f"inbox receipts={receipt.get('receipts')}",
        )
        stock = _stock(sink, "snack")
        story.check(
            "the duplicate was absorbed: snack stock is still 7", stock == 7, f"snack={stock}"
        )
        rows = {o["id"]: _outbox_row(source, o["id"]).get("sent") for o in ORDERS}
        story.check(
            "the second process marked every event sent",
            all(value == 1 for value in rows.values()),
            f"sent flags {rows}",
        )


def response_lost(story: Story, workdir: Path) -> None:
    source, sink = workdir / "source2.db", workdir / "sink2.db"
    story.chapter(
        "The sink commits, the response is lost",
        """A proxy between relay and sink forwards the request, lets the sink commit, then
        cuts the connection before the answer arrives. The relay cannot know the sink applied
        it, so it must keep the event pending and send it again.""",
    )
    with start_service(["serve", "sink", "--db", str(sink), "--port", "0"]) as service:
        event = {"id": "cake-3", "sku": "cake", "qty": 3}
        run_cli("accept", "--source", str(source), stdin=json.dumps(event))
        with FaultProxy(service.port, drop_responses=1) as proxy:
            story.step("Dispatch through the proxy, which drops the first answer.")
            lost = run_cli("dispatch", "--source", str(source), "--to", proxy.url)
            story.check(
                "dispatch reports the failure (exit 1)",
                lost.returncode == 1,
                (lost.stderr.strip().splitlines() or ["(no output)"])[0],
            )
            row = _outbox_row(source, "cake-3")
            stock = _stock(sink, "cake")
            story.check(
                "cake-3 stays pending although the sink applied it",
                row.get("sent") == 0 and stock == 3,
                f"outbox sent={row.get('sent')}, sink cake={stock}",
            )
            story.step("Dispatch again; the answer gets through this time.")
            again = run_cli("dispatch", "--source", str(source), "--to", proxy.url)
        receipt = _receipt(sink, "cake-3")
        row = _outbox_row(source, "cake-3")
        stock = _stock(sink, "cake")
        story.check(
            "the re-send was acknowledged as a duplicate and marked sent",
            again.returncode == 0 and row.get("sent") == 1 and receipt.get("receipts") == 2,
            f"exit {again.returncode}, outbox sent={row.get('sent')}, "
            f"inbox receipts={receipt.get('receipts')}",
        )
        story.check("stock unchanged by the duplicate (cake = 3)", stock == 3, f"cake={stock}")
