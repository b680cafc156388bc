"""The outcomes of the one idempotency move (the move itself is ``store.claims``).

A claim of a key either takes it (the effect is created once), finds it with the same
fingerprint (a duplicate) or finds it with another (a conflict).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Outcome(enum.Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class Claim:
    outcome: Outcome
    #: The reference of the row that holds the key (a seq, an id, a delivery number).
    ref: Any
