"""Idempotency keys of the user's own functions and HTTP API (migration 0011).

Every operation is one statement that both databases run alike, on any transaction: ackledger's
own (``Backend.write``) or one borrowed from the caller (``store.borrowed``), so that a key can
be written in the caller's business transaction. A claim is an ``INSERT ... ON CONFLICT DO
NOTHING`` backed by the primary key (on PostgreSQL a concurrent claim of the same key waits for
the first to commit, then does nothing), then, only if the key was there, a conditional
``UPDATE`` that takes an expired key or one whose holder's lease ran out (the database
re-checks its condition on the newest row, so of two takeovers one wins), then a read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .executor import Executor

TABLE = "ackledger_idempotency_keys"
COLUMNS = (
    "scope", "key", "fingerprint", "state", "lease_token", "lease_expires_at", "result", "body",
    "created_at", "completed_at", "expires_at",
)  # fmt: skip

# Parameters: scope, key, fingerprint, lease_token, lease_expires_at, now, expires_at.
_CLAIM = (
    f"INSERT INTO {TABLE} (scope, key, fingerprint, state, lease_token, lease_expires_at, "
    "created_at, expires_at) VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?) "
    "ON CONFLICT (scope, key) DO NOTHING RETURNING 1"
)
# Parameters: as _CLAIM's, then scope, key, now, now, fingerprint, now. An expired answer is
# forgotten; a holder whose lease ran out died (or stalled): the same call takes its key over,
# another call only once the key has expired as well. An UPDATE locks only the row it changes,
# so a claim that finds the key taken holds no lock on it (a borrowed transaction would keep
# that lock, and with it the holder's completion, waiting until it ends).
_TAKE_OVER = (
    f"UPDATE {TABLE} SET fingerprint = ?, state = 'in_progress', lease_token = ?, "
    "lease_expires_at = ?, result = NULL, body = NULL, created_at = ?, completed_at = NULL, "
    "expires_at = ? WHERE scope = ? AND key = ? AND ("
    "(state = 'completed' AND expires_at <= ?) OR (state = 'in_progress' "
    "AND lease_expires_at <= ? AND (fingerprint = ? OR expires_at <= ?))) RETURNING 1"
)
_FIND = (
    f"SELECT fingerprint, state, lease_expires_at, result, body FROM {TABLE} "
    "WHERE scope = ? AND key = ?"
)
_RENEW = (
    f"UPDATE {TABLE} SET lease_expires_at = ? "
    "WHERE scope = ? AND key = ? AND lease_token = ? AND state = 'in_progress' RETURNING 1"
)
_COMPLETE = (
    f"UPDATE {TABLE} SET state = 'completed', result = ?, body = ?, completed_at = ?, "
    "lease_token = NULL, lease_expires_at = NULL "
    "WHERE scope = ? AND key = ? AND lease_token = ? AND state = 'in_progress' RETURNING 1"
)
_RELEASE = (
    f"DELETE FROM {TABLE} "
    "WHERE scope = ? AND key = ? AND lease_token = ? AND state = 'in_progress' RETURNING 1"
)
# A key is purged once expired, unless a live holder still runs its work.
_PURGE = (
    f"DELETE FROM {TABLE} WHERE (scope, key) IN (SELECT scope, key FROM {TABLE} "
    "WHERE expires_at <= ? AND (state = 'completed' OR lease_expires_at <= ?) "
    "ORDER BY expires_at LIMIT ?) RETURNING 1"
)
_COUNT = f"SELECT state, COUNT(*) FROM {TABLE} GROUP BY state"

#: Keys per transaction of ``purge_expired_keys``.
PURGE_CHUNK = 500


class Found(enum.Enum):
    #: The caller now holds the key (its lease token is the one it gave).
    CLAIMED = "claimed"
    #: The key's work is done: ``result`` and ``body`` are what to answer again.
    COMPLETED = "completed"
    #: Another holder's lease is live until ``lease_expires_at``.
    IN_FLIGHT = "in_flight"
    #: The key was used for another call or request (another fingerprint).
    CONFLICT = "conflict"


@dataclass(frozen=True)
class KeyClaim:
    found: Found
    result: str | None = None
    body: bytes | None = None
    lease_expires_at: float | None = None


def claim_key(
    tx: Executor,
    scope: str,
    key: str,
    fingerprint: str,
    *,
    token: str,
    now: float,
    lease: float,
    ttl: float,
) -> KeyClaim:
    """Take ``(scope, key)`` for the holder ``token`` until ``now + lease``, or say why not.

    Three statements at most: the insert of a new key; else the takeover of an expired or
    dead one; else the read that says why not. A key released between two of them (its row
    deleted) is claimed again from the start."""
    until, expires = now + lease, now + ttl
    while True:
        if tx.one(_CLAIM, (scope, key, fingerprint, token, until, now, expires)) is not None:
            return KeyClaim(Found.CLAIMED)
        changes = (fingerprint, token, until, now, expires, scope, key, now, now, fingerprint, now)
        if tx.one(_TAKE_OVER, changes) is not None:
            return KeyClaim(Found.CLAIMED)
        row = tx.one(_FIND, (scope, key))
        if row is not None:
            break
    stored, state, lease_expires_at, result, body = row
    if stored != fingerprint:
        return KeyClaim(Found.CONFLICT)
    if state == "completed":
        return KeyClaim(Found.COMPLETED, result, None if body is None else bytes(body))
    return KeyClaim(Found.IN_FLIGHT, lease_expires_at=float(lease_expires_at))


def renew_key(tx: Executor, scope: str, key: str, token: str, until: float) -> bool:
    """Move the holder's lease to ``until``; False if ``token`` no longer holds the key."""
    return bool(tx.execute(_RENEW, (until, scope, key, token)))


def complete_key(
    tx: Executor,
    scope: str,
    key: str,
    token: str,
    *,
    result: str | None,
    body: bytes | None,
    now: float,
) -> bool:
    """Store the answer of the holder ``token``; False if it no longer holds the key (its
    lease was taken over, or the key is already completed)."""
    return bool(tx.execute(_COMPLETE, (result, body, now, scope, key, token)))


def release_key(tx: Executor, scope: str, key: str, token: str) -> bool:
    """Forget the key the holder ``token`` gives back unfinished; False if it held none."""
    return bool(tx.execute(_RELEASE, (scope, key, token)))


def purge_expired_keys(tx: Executor, now: float, limit: int = PURGE_CHUNK) -> int:
    """Delete up to ``limit`` expired keys (none that a live holder runs); how many went."""
    return len(tx.execute(_PURGE, (now, now, limit)))


def count_keys(tx: Executor) -> dict[str, int]:
    """How many keys are in each state (both states always present)."""
    counts = {"in_progress": 0, "completed": 0}
    for state, count in tx.execute(_COUNT):
        counts[str(state)] = int(count)
    return counts
