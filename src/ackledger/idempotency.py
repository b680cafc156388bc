"""The one idempotency move, shared by the outbox, the inbox and the ledger.

Inside a write transaction the caller already holds: claim the key with the content's
fingerprint; if the claim took, the caller creates the effect (in the same transaction);
if the key was there, compare fingerprints to tell a duplicate from a conflict. The claim is
one atomic statement backed by a unique constraint, never a read followed by an ``if``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .store.base import Params, Tx
from .store.keys import KeySpace


class Outcome(enum.Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class Claim:
    outcome: Outcome
    #: The reference of the row that holds the key (a seq, an id, a delivery number).
    ref: Any


def claim_once(tx: Tx, space: KeySpace, key: Params, fingerprint: str, rest: Params) -> Claim:
    ref = space.claim(tx, key, fingerprint, rest)
    if ref is not None:
        return Claim(Outcome.APPLIED, ref)
    found = space.find(tx, key)
    if found is None:  # pragma: no cover - the claim saw the key, so it must be there
        raise RuntimeError(f"{space.name}: key {tuple(key)!r} vanished inside a transaction")
    stored, ref = found
    return Claim(Outcome.DUPLICATE if stored == fingerprint else Outcome.CONFLICT, ref)
