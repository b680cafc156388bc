"""Which figures moved for the worse between two trees' runs of the same sections.

A figure is matched by its key. Its unit says which way is better: a rate (``/s``) or a ratio
of ours over a floor or a peer (``x``) is better higher; a time, a size or a cost in commits is
better lower; a share or a count of what happened (``share``, ``rows``, ``messages``) has no
better direction and is compared for equality only. A figure moved for the worse when it lost
more than the threshold: a rate below 0.85 of the earlier one, a time above 1.15 of it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: The most a rebuild may cost on any figure.
THRESHOLD = 0.15

HIGHER = "higher"
LOWER = "lower"
NONE = ""

_LOWER_UNITS = frozenset({"ms", "µs", "us", "s", "MiB", "KiB", "instructions", "commits"})


def direction(unit: str) -> str:
    """Which way a figure in ``unit`` is better: HIGHER, LOWER or NONE."""
    if unit.endswith("/s") or unit == "x":
        return HIGHER
    return LOWER if unit in _LOWER_UNITS else NONE


@dataclass(frozen=True)
class Pair:
    """One figure both trees measured: the earlier tree's median and ours."""

    key: str
    label: str
    unit: str
    theirs: float
    ours: float

    @property
    def ratio(self) -> float:
        """Ours over theirs (infinite when theirs is 0 and ours is not)."""
        if self.theirs == 0:
            return 1.0 if self.ours == 0 else math.inf
        return self.ours / self.theirs

    def worse(self, threshold: float = THRESHOLD) -> bool:
        """Whether ours lost more than ``threshold`` of theirs, in the figure's direction."""
        way = direction(self.unit)
        if way == HIGHER:
            return self.ratio < 1.0 - threshold
        if way == LOWER:
            return self.ratio > 1.0 + threshold
        return False


@dataclass
class Comparison:
    """Two runs' figures side by side: those both have, and the keys only one has."""

    pairs: list[Pair] = field(default_factory=list)
    only_theirs: list[str] = field(default_factory=list)
    only_ours: list[str] = field(default_factory=list)
    #: Keys one tree measured and the other refused or could not measure (NaN, no samples).
    unmeasured: list[str] = field(default_factory=list)

    def worse(self, threshold: float = THRESHOLD) -> list[Pair]:
        return [pair for pair in self.pairs if pair.worse(threshold)]

    def changed_facts(self) -> list[Pair]:
        """Figures with no better direction whose value is not the same in both trees."""
        return [p for p in self.pairs if direction(p.unit) == NONE and p.ours != p.theirs]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs": [asdict(pair) for pair in self.pairs],
            "only_theirs": self.only_theirs,
            "only_ours": self.only_ours,
            "unmeasured": self.unmeasured,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        return cls(
            [Pair(**pair) for pair in data.get("pairs", [])],
            list(data.get("only_theirs", [])),
            list(data.get("only_ours", [])),
            list(data.get("unmeasured", [])),
        )


def _median(figure: dict[str, Any]) -> float | None:
    value = figure.get("median")
    if not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def compare(theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]) -> Comparison:
    """Match two runs' figures (stored figure dicts by key); ours' label and unit are kept.

    A key both measured in different units is not a pair: the figure changed meaning.
    """
    comparison = Comparison()
    for key, figure in ours.items():
        if key not in theirs:
            comparison.only_ours.append(key)
            continue
        earlier = theirs[key]
        if earlier.get("unit") != figure.get("unit"):
            comparison.only_ours.append(key)
            comparison.only_theirs.append(key)
            continue
        now, then = _median(figure), _median(earlier)
        if now is None or then is None:
            comparison.unmeasured.append(key)
            continue
        comparison.pairs.append(Pair(key, figure["label"], figure["unit"], then, now))
    comparison.only_theirs += [key for key in theirs if key not in ours]
    return comparison
