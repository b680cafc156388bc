"""HTTP clients with a connection each, and a way to make them all ask at the same moment."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ackledger.procs import Service

T = TypeVar("T")
Answer = tuple[int, http.client.HTTPResponse, Any]


class Client:
    """One HTTP connection of its own to a service (kept alive across its requests)."""

    def __init__(self, service: Service) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)

    def call(self, method: str, path: str, body: bytes | None = None) -> Answer:
        headers = {"Content-Type": "application/json"} if body is not None else {}
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


def concurrently(clients: Sequence[Client], ask: Callable[[int, Client], T]) -> list[T]:
    """Run ``ask(i, client)`` for every client on its own thread, all released at once.

    Every connection is open before anyone sends, so the requests reach the services together.
    Returns the answers in client order; re-raises the first error a thread met.
    """
    for client in clients:
        if client.conn.sock is None:
            client.conn.connect()
    start = threading.Barrier(len(clients))
    answers: list[T | None] = [None] * len(clients)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int, client: Client) -> None:
        try:
            start.wait(timeout=60)
            answers[i] = ask(i, client)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    if errors:
        raise errors[0]
    assert all(answer is not None for answer in answers), "a client did not finish"
    return [answer for answer in answers if answer is not None]
