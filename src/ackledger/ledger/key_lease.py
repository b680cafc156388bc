"""Holding an idempotency key on ackledger's own connection: the claim, the lease renewed in the
background while the work runs, and the release or the completion.

A holder's lease is short (seconds), so that a key whose process died is taken over soon; the
work may run longer, so the lease is renewed every third of it until the work is over. One
thread per process renews every held key's lease; it touches only the database, never the
caller's event loop, so it serves plain and ``async`` callers alike.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time

from .._core.duration import check_age, parse_duration
from ..store import Backend
from ..store.idempotency_keys import KeyClaim, claim_key, complete_key, release_key, renew_key

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


class OwnKeys:
    """The keys of ``scope`` held on ackledger's own connection, each step its own transaction:
    ``@ledger.idempotent`` without ``using_arg`` and ``IdempotencyMiddleware``."""

    def __init__(self, db: Backend, scope: str, *, lease: float, ttl: float) -> None:
        self.db, self.scope, self.lease, self.ttl = db, scope, lease, ttl
        # The claim, its renewals and its release only say "a live holder has the key". Where an
        # unsynced commit is lost only with every process that could hold the key, losing one is
        # that holder's death, which the lease already covers (here the key is free sooner):
        # they skip the fsync. The completion always waits for the disk: losing it would run a
        # finished call again.
        self._hold_durable = not db.relaxed_lost_only_with_writers

    def claim(self, key: str, fingerprint: str, token: str) -> KeyClaim:
        with self.db.write(durable=self._hold_durable) as tx:
            return claim_key(
                tx, self.scope, key, fingerprint, token=token, now=time.time(), lease=self.lease,
                ttl=self.ttl,
            )  # fmt: skip

    def renew(self, key: str, token: str) -> bool:
        """False once ``token`` no longer holds the key (completed or taken over)."""
        with self.db.write(durable=self._hold_durable) as tx:
            return renew_key(tx, self.scope, key, token, time.time() + self.lease)

    def release(self, key: str, token: str) -> None:
        with self.db.write(durable=self._hold_durable) as tx:
            release_key(tx, self.scope, key, token)

    def complete(self, key: str, token: str, result: str, body: bytes | None) -> bool:
        """False when ``token`` no longer held the key (taken over, or completed already)."""
        with self.db.write() as tx:
            return complete_key(
                tx, self.scope, key, token, result=result, body=body, now=time.time()
            )

    def hold(self, key: str, token: str) -> Held:
        """Renew the key's lease while the work runs, until ``Held.stop()``."""
        return _KEEPER.hold(Held(self, key, token))


class Held:
    """A key whose lease the process's keeper renews (``OwnKeys.hold``)."""

    __slots__ = ("due", "key", "keys", "lost", "token")

    def __init__(self, keys: OwnKeys, key: str, token: str) -> None:
        self.keys, self.key, self.token = keys, key, token
        #: When (monotonic) the next renewal is due: a third of the lease after the last one.
        self.due = time.monotonic() + keys.lease / 3
        #: Set when a renewal found the key no longer held by ``token`` (taken over).
        self.lost = False

    def stop(self) -> None:
        _KEEPER.drop(self)


class _Keeper:
    """One thread renews the leases of all the keys this process holds. A thread started per
    call cost more than the rest of the call; most calls end before their first renewal is
    due, and for them holding is only an entry added to a set and removed again."""

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[Held, None] = {}
        self._thread: threading.Thread | None = None
        #: When the thread wakes next (inf: it waits for a key). A new key wakes it only if due
        #: earlier: waking it is a switch of threads, as costly as the rest of a short call.
        self._wake_at = math.inf
        #: The shortest time between renewals of the keys held so far. With no key held the
        #: thread still wakes after it once, so that a run of short calls (each gone before the
        #: thread looks) finds it due to wake anyway instead of waking it once per call.
        self._every = math.inf
        self._idle = False

    def hold(self, held: Held) -> Held:
        with self._cond:
            self._held[held] = None
            self._every = min(self._every, held.keys.lease / 3)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ackledger-leases", daemon=True
                )
                self._thread.start()
            if held.due < self._wake_at:
                self._idle = False
                self._cond.notify()
        return held

    def drop(self, held: Held) -> None:
        with self._cond:
            self._held.pop(held, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [held for held in self._held if held.due <= now]
                if not due:
                    if self._held:
                        self._wake_at, self._idle = min(held.due for held in self._held), False
                    else:  # once more after a while, then (still idle) until a key comes
                        self._wake_at = math.inf if self._idle else now + self._every
                        self._idle = True
                    self._cond.wait(None if self._wake_at == math.inf else self._wake_at - now)
                    continue
                self._wake_at = now  # renewing: the loop looks again before it waits
                for held in due:
                    held.due = now + held.keys.lease / 3
            for held in due:
                self._renew(held)

    def _renew(self, held: Held) -> None:
        if held not in self._held:
            return  # stopped meanwhile
        try:
            still = held.keys.renew(held.key, held.token)
        except Exception:  # a database hiccup: the next turn tries again
            log.warning("idempotency key %r: lease renewal failed", held.key, exc_info=True)
            return
        if not still:
            held.lost = True
            self.drop(held)
            log.info("idempotency key %r: no longer held (completed or taken over)", held.key)


_KEEPER = _Keeper()
if hasattr(os, "register_at_fork"):
    # A forked child has none of the parent's threads, and none of its calls hold keys.
    os.register_at_fork(after_in_child=_KEEPER._forget)


def retry_after(lease_expires_at: float | None, now: float) -> int:
    """Whole seconds (at least 1) until a live lease ends."""
    if lease_expires_at is None:
        return 1
    return max(1, math.ceil(lease_expires_at - now))
