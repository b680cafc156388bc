"""Idempotency keys of the user's own functions and HTTP API (migration 0011).

Every operation is one statement that both databases run alike, on any transaction: ackledger's
own (``Backend.write``) or one borrowed from the caller (``store.borrowed``), so that a key can
be written in the caller's business transaction. The claim is one ``INSERT ... ON CONFLICT DO
UPDATE ... WHERE`` backed by the primary key: it takes a free key, an expired one, or one whose
holder's lease ran out, and leaves any other alone (on PostgreSQL a concurrent claim of the same
key waits for the first to commit, then sees its row). Only a claim that did not take the key
reads it, in the same transaction.
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
    f"INSERT INTO {TABLE} AS k (scope, key, fingerprint, state, lease_token, lease_expires_at, "
    "created_at, expires_at) VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?) "
    "ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, "
    "state = 'in_progress', lease_token = excluded.lease_token, "
    "lease_expires_at = excluded.lease_expires_at, result = NULL, body = NULL, "
    "created_at = excluded.created_at, completed_at = NULL, expires_at = excluded.expires_at "
    # An expired answer is forgotten; a holder whose lease ran out died (or stalled): the same
    # call takes its key over, another call only once the key has expired as well.
    "WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at) "
    "OR (k.state = 'in_progress' AND k.lease_expires_at <= excluded.created_at "
    "AND (k.fingerprint = excluded.fingerprint OR k.expires_at <= excluded.created_at)) "
    "RETURNING lease_token"
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
    """Take ``(scope, key)`` for the holder ``token`` until ``now + lease``, or say why not."""
    taken = tx.one(_CLAIM, (scope, key, fingerprint, token, now + lease, now, now + ttl))
    if taken is not None:
        return KeyClaim(Found.CLAIMED)
    row = tx.one(_FIND, (scope, key))
    if row is None:  # pragma: no cover - the claim saw the row, and holds its lock
        raise RuntimeError(f"{TABLE}: key {key!r} vanished inside a transaction")
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
