from __future__ import annotations

import pytest

from ackledger._core.duration import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45.0),
        ("90m", 5400.0),
        ("12h", 43200.0),
        ("30d", 2_592_000.0),
        ("7d", 604_800.0),
        ("2w", 1_209_600.0),
        ("1.5h", 5400.0),
        (" 7D ", 604_800.0),
    ],
)
def test_parses_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "7",
        "d",
        "0s",
        "0.0d",
        "-1d",
        "+1d",
        "1e3s",
        "1 d",
        "1d12h",
        "1y",
        "1.d",
        ".5d",
        "9" * 400 + "d",
    ],
)
def test_refuses_everything_else(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_refuses_non_strings() -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(7)  # type: ignore[arg-type]
