"""A small, known state for the console to show: the screenshots (``console_shots``) and the
browser tests are made on it.

An outbox with events sent, pending and quarantined for two reasons; a sink's inbox that
applied the sent ones and one pending one (an ACK lost: reconcile's harmless class); a
ledger with keys asked for by more than one Pod (a Job re-run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..ledger.ledger import Ledger
from ..sink.inbox import Inbox
from ..source.outbox import Outbox

#: Quarantine reasons of the scene, the first given to two events.
REASONS = ("sku retired: the warehouse refuses it", "qty over the pallet limit")


@dataclass(frozen=True)
class Scene:
    source: str
    sink: str
    ledger: str


def build(workdir: Path, source: str | None = None) -> Scene:
    """The scene's databases under ``workdir`` (the outbox at ``source`` when given: a
    ``postgresql://`` URL of an empty or migrated database)."""
    scene = Scene(
        source or str(workdir / "source.db"), str(workdir / "sink.db"), str(workdir / "ledger.db")
    )
    with Outbox(scene.source) as outbox, Inbox(scene.sink) as inbox:
        for number in range(1, 13):
            outbox.accept({"id": f"order-{number:04d}", "sku": f"SKU-{number % 3}", "qty": number})
        sent = [f"order-{number:04d}" for number in range(1, 6)]
        for event in outbox.pending(len(sent) + 1):
            # The sixth is applied at the sink with its ACK lost: still pending here.
            event.pop("seq")  # the outbox's own number, not part of the event
            inbox.receive(event)
        outbox.mark_sent_many(sent, attempted=True)
        outbox.record_failure("order-0007", "HTTP 422 from the sink: sku SKU-1 is retired")
        outbox.quarantine("order-0007", REASONS[0])
        outbox.record_failure("order-0010", "HTTP 422 from the sink: sku SKU-1 is retired")
        outbox.quarantine("order-0010", REASONS[0])
        outbox.quarantine("order-0008", REASONS[1])
    with Ledger(scene.ledger) as ledger:
        for case in ("case-1001", "case-1002"):
            for step in ("charge", "email"):
                for pod in ("pod-a", "pod-b"):  # the Job's first Pod, then its re-run
                    ledger.request(case, step, pod)
        ledger.complete("case-1001", "charge", {"receipt": "R-1"})
    return scene
