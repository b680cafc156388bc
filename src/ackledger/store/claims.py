"""The one idempotency move, shared by the outbox, the inbox and the ledger.

Inside a write transaction the caller already holds: claim the key with the content's
fingerprint; if the claim took, the caller creates the effect (in the same transaction);
if the key was there, compare fingerprints to tell a duplicate from a conflict. The claim is
one atomic statement backed by a unique constraint, never a read followed by an ``if``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from .._core.idempotency import Claim, Outcome
from .executor import Executor, Params
from .keys import KeySpace


def claim_once(tx: Executor, space: KeySpace, key: Params, fingerprint: str, rest: Params) -> Claim:
    return claimed(tx, space, key, fingerprint, space.claim(tx, key, fingerprint, rest))


def claimed(tx: Executor, space: KeySpace, key: Params, fingerprint: str, ref: Any) -> Claim:
    """The outcome of a claim of ``key`` that returned ``ref`` (None: the key was there), for
    a dialect that ran the claim's INSERT inside a statement of its own."""
    if ref is not None:
        return Claim(Outcome.APPLIED, ref)
    found = space.find(tx, key)
    if found is None:  # pragma: no cover - the claim saw the key, so it must be there
        raise RuntimeError(f"{space.name}: key {tuple(key)!r} vanished inside a transaction")
    stored, ref = found
    return Claim(Outcome.DUPLICATE if stored == fingerprint else Outcome.CONFLICT, ref)


def claim_all(tx: Executor, space: KeySpace, rows: Sequence[Params]) -> list[Outcome]:
    """``claim_once`` of many distinct keys of a space that can claim many rows, in one
    statement per 64 keys plus one per 64 keys that were there. Each row is what
    ``claim_once`` would bind: the key, the fingerprint, then the rest of the row.

    The outcome of each key is the one ``claim_once`` would give it. Unlike a loop of
    ``claim_once``, every free key is claimed, those after a conflicting one included: a
    caller that must stop at the first conflict has to undo the rest (roll back).
    """
    if space.claim_rows is None:
        raise ValueError(f"{space.name}: no claim of many keys")
    return outcomes_of_claim(tx, space, rows, space.claim_rows(tx, rows))


def outcomes_of_claim(
    tx: Executor, space: KeySpace, rows: Sequence[Params], claimed: Collection[tuple[Any, ...]]
) -> list[Outcome]:
    """The outcome of each of ``rows`` (as ``claim_all``'s) once the keys ``claimed`` were
    taken by a statement that claimed them all: for a dialect that ran the claim inside a
    statement of its own."""
    if space.find_keys is None:
        raise ValueError(f"{space.name}: no claim of many keys")
    if len(claimed) == len(rows):
        return [Outcome.APPLIED] * len(rows)
    width = space.key_width
    keys = [tuple(row[:width]) for row in rows]
    stored = space.find_keys(tx, [key for key in keys if key not in claimed])
    outcomes: list[Outcome] = []
    for key, row in zip(keys, rows, strict=True):
        fp = row[width]
        if key in claimed:
            outcomes.append(Outcome.APPLIED)
            continue
        found = stored.get(key)
        if found is None:  # pragma: no cover - the claim saw the key, so it must be there
            raise RuntimeError(f"{space.name}: key {key!r} vanished inside a transaction")
        outcomes.append(Outcome.DUPLICATE if found == fp else Outcome.CONFLICT)
    return outcomes
