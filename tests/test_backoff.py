"""Capped exponential backoff with full jitter: bounds, jitter, seeding, reset. No sleeping."""

from __future__ import annotations

import math
import random

import pytest

from ackledger._core.backoff import Backoff


class _Top(random.Random):
    """A generator that always draws the upper bound: exposes the ceiling used."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_each_delay_is_drawn_between_zero_and_the_capped_doubling() -> None:
    backoff = Backoff(0.1, 1.0, rng=random.Random(1))
    for failures in range(40):
        ceiling = min(1.0, 0.1 * 2**failures)
        assert backoff.ceiling() == pytest.approx(ceiling)
        delay = backoff.next_delay()
        assert 0.0 <= delay <= ceiling


def test_the_upper_bound_doubles_from_base_then_stays_at_the_cap() -> None:
    backoff = Backoff(0.25, 3.0, rng=_Top())
    drawn = [backoff.next_delay() for _ in range(7)]
    assert drawn == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_full_jitter_spreads_waits_over_the_whole_range() -> None:
    backoff = Backoff(1.0, 8.0, rng=random.Random(7))
    backoff.failures = 10  # at the cap
    delays = []
    for _ in range(500):
        delays.append(backoff.next_delay())
        backoff.failures = 10
    assert min(delays) < 0.8 and max(delays) > 7.2  # not "cap/2 + jitter", not fixed
    assert len(set(delays)) == len(delays)


def test_the_same_seed_gives_the_same_waits_and_another_seed_does_not() -> None:
    def waits(seed: int) -> list[float]:
        backoff = Backoff(0.1, 30.0, rng=random.Random(seed))
        return [backoff.next_delay() for _ in range(12)]

    assert waits(42) == waits(42)
    assert waits(42) != waits(43)


def test_a_success_resets_to_the_base() -> None:
    backoff = Backoff(0.5, 60.0, rng=_Top())
    for _ in range(6):
        backoff.next_delay()
    assert backoff.ceiling() == 32.0
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay() == 0.5


def test_a_very_long_outage_does_not_overflow() -> None:
    backoff = Backoff(0.1, 30.0, rng=_Top())
    backoff.failures = 100_000
    assert backoff.next_delay() == 30.0


@pytest.mark.parametrize(
    ("base", "cap", "field"),
    [
        (0, 1, "base"),
        (-1, 1, "base"),
        (math.nan, 1, "base"),
        (math.inf, 1, "base"),
        (True, 1, "base"),
        ("1", 1, "base"),
        (1, 0, "cap"),
        (2, 1, "cap"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(base: object, cap: object, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        Backoff(base, cap)  # type: ignore[arg-type]
