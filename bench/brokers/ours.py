"""Our side of the broker benchmark: ``ackledger relay`` from a PostgreSQL outbox to a broker.

One relay process (the default PostgreSQL relay: it leases partitions), with no flags (batches
of 16 to a broker), ``--per-item`` or the flags a run names; the clock runs from its first
mark to its last, read from another connection (``marks_rate``), so its start-up is not
counted.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ackledger import Outbox
from ackledger.ops.processes import cli_command

from ..common import Query, marks_rate
from .stopping import terminate


@contextmanager
def relay(
    source: str, url: str, *extra: str, poll: str | None = "0.05"
) -> Iterator[subprocess.Popen[bytes]]:
    """An ``ackledger relay`` process to ``url``; SIGTERM (it finishes its send) on the way out.
    ``poll``: its ``--poll-interval`` (None: the default, as an operator runs it)."""
    polling = () if poll is None else ("--poll-interval", poll)
    process = subprocess.Popen(
        cli_command("relay", "--source", source, "--to", url, *polling, *extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        terminate(process)


@contextmanager
def reader(source: str) -> Iterator[Query]:
    with Outbox(source) as outbox:

        def query(sql: str, params: tuple[Any, ...]) -> list[Any]:
            with outbox.backend.read() as tx:
                return tx.execute(sql, params)

        yield query


def rate(source: str, url: str, events: int, *flags: str) -> float:
    """Events/s of one relay (``flags`` added) draining ``events`` pending events to ``url``."""
    with reader(source) as query, relay(source, url, *flags):
        return marks_rate(query, events, timeout=900)


@dataclass(frozen=True)
class Outcome:
    sent: int
    quarantined: int
    pending: int


def unroutable(source: str, url: str, events: int, timeout: float = 120.0) -> Outcome:
    """Relay ``events`` that the broker returns, with ``--on-poison quarantine``; what the
    outbox says afterwards."""
    with reader(source) as query, relay(source, url, "--on-poison", "quarantine"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not query(
                "SELECT 1 FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 LIMIT 1", ()
            ):
                break
            time.sleep(0.05)
        rows = query(
            "SELECT sum(sent), sum(quarantined), sum(CASE WHEN sent = 0 AND quarantined = 0 "
            "THEN 1 ELSE 0 END) FROM ackledger_outbox",
            (),
        )
    sent, quarantined, pending = (int(value or 0) for value in rows[0])
    return Outcome(sent, quarantined, pending)
