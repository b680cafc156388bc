"""Holding an idempotency key while its work runs: the lease, renewed in the background.

A holder's lease is short (seconds), so that a key whose process died is taken over soon; the
work may run longer, so a thread renews the lease every third of it until the work is over. The
thread touches only the database, never the caller's event loop, so it serves plain and
``async`` callers alike.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time

from .._core.duration import check_age, parse_duration
from ..store import Backend
from ..store.idempotency_keys import renew_key

log = logging.getLogger("ackledger.idempotency")


def as_seconds(value: object, name: str) -> float:
    """A duration written as ``"30s"``/``"24h"`` or as a number of seconds."""
    try:
        if isinstance(value, str):
            return parse_duration(value)
        return check_age(value, name)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def new_token() -> str:
    return secrets.token_hex(16)


class LeaseKeeper:
    """Renews ``(scope, key)``'s lease for the holder ``token`` until ``stop()``."""

    def __init__(self, db: Backend, scope: str, key: str, token: str, lease: float) -> None:
        self._db, self._scope, self._key, self._token = db, scope, key, token
        self._lease = lease
        self._stopped = threading.Event()
        #: Set when a renewal found the key no longer held by ``token`` (taken over).
        self.lost = False
        self._thread = threading.Thread(
            target=self._run, name=f"ackledger-lease-{key[:32]}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        every = self._lease / 3
        while not self._stopped.wait(every):
            try:
                with self._db.write() as tx:
                    held = renew_key(
                        tx, self._scope, self._key, self._token, time.time() + self._lease
                    )
            except Exception:  # a database hiccup: the next turn tries again
                log.warning("idempotency key %r: lease renewal failed", self._key, exc_info=True)
                continue
            if not held:
                self.lost = True
                log.info("idempotency key %r: no longer held (completed or taken over)", self._key)
                return


def retry_after(lease_expires_at: float | None, now: float) -> int:
    """Whole seconds (at least 1) until a live lease ends."""
    if lease_expires_at is None:
        return 1
    return max(1, math.ceil(lease_expires_at - now))
