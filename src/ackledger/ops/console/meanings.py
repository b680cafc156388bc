"""What each figure of ``status`` means, in one line each, as the overview shows them."""

from __future__ import annotations

from typing import Any

from ..._core.timestamps import utc_timestamp

#: (key in ``Outbox.stats``, label, meaning) in the order the overview shows them.
FIGURES = (
    (
        "pending",
        "pending",
        "events the relay can send now (not sent, not quarantined); in a partition held by a "
        "lease, only its holder can, until the lease ends",
    ),
    (
        "oldest_pending_age_s",
        "oldest pending age",
        "how long the first pending event has waited: grows when the relay is stopped or the "
        "sink refuses",
    ),
    ("attempts", "attempts", "send attempts with an outcome over the database's life"),
    ("sent", "sent", "events marked sent after an exact ACK, purged ones included"),
    (
        "quarantined",
        "quarantined",
        "events held out of pending by an operator: NOT delivered until requeued",
    ),
    ("purged", "purged", "sent rows deleted by purge (their ids are forgotten here)"),
    (
        "last_error",
        "last error",
        "the latest error of an event that is still not sent",
    ),
)


def shown_figures(figures: dict[str, Any]) -> list[dict[str, str]]:
    """``[{"key", "label", "value", "means"}]`` of the outbox's figures, values as text."""
    rows = []
    for key, label, means in FIGURES:
        value = figures[key]
        if key == "oldest_pending_age_s":
            text = f"{value:.1f} s"
        elif key == "last_error":
            text = (
                "-"
                if not value
                else f"{value['id']} at {utc_timestamp(value['at'])}: {value['error']}"
            )
        else:
            text = str(value)
        rows.append({"key": key, "label": label, "value": text, "means": means})
    return rows
