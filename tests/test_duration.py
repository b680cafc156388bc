from __future__ import annotations

import pytest

from ackledger.duration import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 7 * 86400),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("45s", 45),
        ("0.5s", 0.5),
        ("2w", 14 * 86400),
        (" 7D ", 7 * 86400),
    ],
)
def test_durations_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "  ", "7", "d", "-1d", "7x", "1d 2h", "1.d", "7d!", "1e3s", "0s", "0d"]
)
def test_unreadable_or_zero_durations_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"^duration:"):
        parse_duration(text)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^duration:"):
        parse_duration(7)  # type: ignore[arg-type]
