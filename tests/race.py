"""Races: many parties acting at the same moment (threads behind one barrier), and HTTP clients
with a connection each to race with."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ackledger.ops.processes import Service

from .inprocess import content_type

T = TypeVar("T")
P = TypeVar("P")
Answer = tuple[int, http.client.HTTPResponse, Any]


class Client:
    """One HTTP connection of its own to a service (kept alive across its requests)."""

    def __init__(self, service: Service) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)

    def call(self, method: str, path: str, body: bytes | None = None) -> Answer:
        headers = {"Content-Type": content_type(path)} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, response, json.loads(data) if data[:1] in (b"{", b"[") else data

    def post(self, path: str, obj: object) -> Answer:
        return self.call("POST", path, json.dumps(obj).encode())

    def deliver(self, **fields: Any) -> Answer:
        """``POST /deliveries`` to a ledger (``pod_uid`` and ``mode`` have defaults)."""
        return self.post("/deliveries", {"pod_uid": "pod", "mode": "idempotent", **fields})

    def close(self) -> None:
        self.conn.close()


def at_once(
    parties: Sequence[P],
    act: Callable[[int, P], T],
    *,
    ready: Callable[[P], object] | None = None,
) -> list[T]:
    """Run ``act(i, party)`` for every party on its own thread, all released at one barrier.

    ``ready(party)`` runs on the party's thread before the barrier (open a connection, say),
    so that what is timed is only the act. Returns the answers in party order; re-raises the
    first error a thread met.
    """
    start = threading.Barrier(len(parties))
    answers: list[T | None] = [None] * len(parties)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int, party: P) -> None:
        try:
            if ready is not None:
                ready(party)
            start.wait(timeout=60)
            answers[i] = act(i, party)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(parties)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    if errors:
        raise errors[0]
    assert all(answer is not None for answer in answers), "a party did not finish"
    return [answer for answer in answers if answer is not None]


def connected(client: Client) -> None:
    """``ready`` for HTTP clients: the connection is open before anyone sends."""
    if client.conn.sock is None:
        client.conn.connect()
