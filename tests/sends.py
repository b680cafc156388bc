"""A partition worker whose sends are plain callables: the relay's loop without a network."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ackledger.relay.partitions import PartitionWorker
from ackledger.relay.settings import RelaySettings
from ackledger.wire.sender import Refusal

#: Never reached: the fake sender answers instead.
UNUSED_URL = "http://127.0.0.1:9/events"


class FakeSender:
    """The shape of ``ackledger.wire.sender.sender(...)``, made of the given callables."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Any] | None = None,
        send_batch: Callable[[list[dict[str, Any]]], Any] | None = None,
    ) -> None:
        self._send = send
        self._send_batch = send_batch
        self.refusal: Refusal | None = None

    def send(self, event: dict[str, Any]) -> bool:
        assert self._send is not None
        answer: bool = self._send(event)
        return answer

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        assert self._send_batch is not None
        answer: int = self._send_batch(events)
        return answer

    def close(self) -> None:
        pass


def partition_worker(
    outbox: Any,
    *,
    send: Callable[[dict[str, Any]], Any] | None = None,
    send_batch: Callable[[list[dict[str, Any]]], Any] | None = None,
    stop: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
    after_delivery: Callable[[str], object] | None = None,
    marker: Any = None,
    **settings: Any,
) -> PartitionWorker:
    """A worker on ``outbox``; ``settings`` are RelaySettings fields (``owner`` at least);
    ``marker``: the second Outbox of ``pipeline=True``."""
    told = RelaySettings(url=UNUSED_URL, batch=send_batch is not None, **settings)
    return PartitionWorker(
        outbox, told, FakeSender(send, send_batch), stop=stop, log=log,
        after_delivery=after_delivery, marker=marker,
    )  # fmt: skip
