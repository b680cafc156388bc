"""``--on-poison hold`` (the default): a poison event keeps the relay up and alerting, never
a crash loop; the printed commands run as printed, and the relay goes on once they are run."""

from __future__ import annotations

import re
import shlex
import threading
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.processes import run_cli
from tests.events import SOURCE
from tests.opshelp import count, ids, metrics, one, start_relay, wait_until
from tests.plainreceiver import Answer, PlainReceiver

pytestmark = pytest.mark.slow


class RefusingReceiver(PlainReceiver):
    """Answers 204 (``--ack status``), but 422 to any request that carries p-2."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refused = 0
        super().__init__(self._answer)

    def _answer(self, n: int, sent: bytes) -> Answer:
        if b'"p-2"' in sent:
            with self.lock:
                self.refused += 1
            return 422, {"Content-Type": "application/json"}, b'{"detail": "never"}'
        return 204, {}, b""


@pytest.mark.parametrize("flags", [[], ["--pipeline"]])
def test_a_held_poison_event_keeps_the_relay_up_alerting_until_it_is_quarantined(
    tmp_path: Path, flags: list[str]
) -> None:
    source = tmp_path / "source.db"
    with Outbox(source, source=SOURCE) as outbox:
        for event_id in ("a-1", "p-2", "c-3"):
            outbox.accept({"id": event_id, "sku": "tea", "qty": 1})
    log = tmp_path / "relay.log"
    with RefusingReceiver() as receiver:
        relay = start_relay(source, receiver.url, log, "--ack", "status", *flags)
        try:
            wait_until(lambda: receiver.refused >= 3, "p-2 tried again, held")
            assert relay.process.poll() is None  # alive: no exit, no crash loop
            assert ids(source, "SELECT id FROM ackledger_outbox WHERE sent = 1") == ["a-1"]
            samples = metrics(relay.base_url)
            assert one(samples, "ackledger_relay_poison_alerts_total", action="hold") >= 2
            lines = log.read_text().splitlines()
            holding = [line for line in lines if "holding it" in line]
            assert len(holding) >= 2 and "p-2" in holding[0], lines[-5:]
            # The line's commands run as printed; the quarantine lets the relay go on.
            trace, quarantine = re.findall(r"`ackledger ([^`]*)`", holding[0])
            traced = run_cli(*shlex.split(trace))
            assert traced.returncode in (0, 1) and "p-2" in traced.stdout, traced.stderr
            assert run_cli(*shlex.split(quarantine)).returncode == 0
            wait_until(lambda: count(source, "sent = 1") == 2, "c-3 sent after the quarantine")
        finally:
            assert relay.stop() == 0
    assert ids(source, "SELECT id FROM ackledger_outbox WHERE quarantined = 1") == ["p-2"]
