"""A purge racing requests for the very keys it purges (the ledger, on every backend).

Each round makes a few keys idle (their attempts moved 40 days into the past through the test's
own connection), then releases one purge and several senders at one barrier; every sender asks
for every key once. Whatever the interleaving, each key must end up one of two ways: the
requests came first (the key continues: its delivery, attempts old count + 1...; the purge kept
it) or the purge came first (the key starts fresh: one new delivery, attempts 1, 2...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ackledger import Ledger

from ..race import at_once
from .conftest import Target

DAY = 86400.0
CASE = "purge-race"
KEYS = 6
SENDERS = 4
ROUNDS = 12

#: Sends one request for (CASE, work_id) as sender ``i``; returns the answer's body.
Send = Callable[[int, str], dict[str, Any]]


@dataclass(frozen=True)
class Before:
    delivery_no: int
    attempts: int


def make_idle_keys(ledger: Ledger, target: Target, round_no: int) -> dict[str, Before]:
    """KEYS keys of 1 to 3 attempts each, all idle for 40 days (past the default retention)."""
    keys: dict[str, Before] = {}
    for j in range(KEYS):
        work_id = f"r{round_no}-k{j}"
        attempts = 1 + j % 3
        answers = [ledger.request(CASE, work_id, f"setup-{n}") for n in range(attempts)]
        keys[work_id] = Before(answers[0]["delivery_no"], attempts)
    target.execute(
        "UPDATE ackledger_attempts SET at = at - ? WHERE case_id = ? AND work_id LIKE ?",
        (40 * DAY, CASE, f"r{round_no}-%"),
    )
    return keys


def race(purger: Ledger, keys: list[str], send: Send, ready: Callable[[int], object]) -> Any:
    """Party 0 purges, parties 1..SENDERS send a request for every key (each its own order);
    returns (the purge's answer, [(work_id, answer), ...])."""

    def act(i: int, _: int) -> Any:
        if i == 0:
            return purger.purge()
        order = keys[i % len(keys) :] + keys[: i % len(keys)]
        return [(work_id, send(i, work_id)) for work_id in order]

    answers = at_once(list(range(SENDERS + 1)), act, ready=ready)
    return answers[0], [pair for sent in answers[1:] for pair in sent]


def check_round(
    target: Target,
    before: dict[str, Before],
    purged: dict[str, int],
    answers: list[tuple[str, dict[str, Any]]],
) -> int:
    """Every key continued or started fresh, its rows say the same, and the purge removed
    exactly the keys that started fresh. Returns how many keys started fresh."""
    fresh: list[str] = []
    for work_id, old in before.items():
        got = [answer for key, answer in answers if key == work_id]
        assert len(got) == SENDERS
        (number,) = {answer["delivery_no"] for answer in got}
        numbers = sorted(answer["attempt"] for answer in got)
        duplicates = sorted(answer["duplicate"] for answer in got)
        if number == old.delivery_no:  # the requests came first: the key was kept
            assert numbers == list(range(old.attempts + 1, old.attempts + SENDERS + 1)), got
            assert duplicates == [True] * SENDERS, got
            rows = old.attempts + SENDERS
        else:  # the purge came first: the key started fresh
            assert number > old.delivery_no, got
            assert numbers == list(range(1, SENDERS + 1)), got
            assert duplicates == [False] + [True] * (SENDERS - 1), got
            fresh.append(work_id)
            rows = SENDERS
        key = (CASE, work_id)
        assert target.rows(
            "SELECT delivery_no, mode FROM ackledger_deliveries WHERE case_id = ? AND work_id = ?",
            key,
        ) == [(number, "idempotent")]
        assert target.rows(
            "SELECT COUNT(*), MIN(delivery_no), MAX(delivery_no) FROM ackledger_attempts "
            "WHERE case_id = ? AND work_id = ?",
            key,
        ) == [(rows, number, number)]
    assert purged == {
        "deliveries": len(fresh),
        "attempts": sum(before[work_id].attempts for work_id in fresh),
    }
    assert target.rows(
        "SELECT COUNT(*) FROM ackledger_attempts WHERE delivery_no IS NOT NULL AND NOT EXISTS ("
        "SELECT 1 FROM ackledger_deliveries WHERE ackledger_deliveries.delivery_no = "
        "ackledger_attempts.delivery_no)"
    ) == [(0,)]
    return len(fresh)


def run_rounds(target: Target, send: Send, ready: Callable[[int], object]) -> None:
    """ROUNDS rounds of the race; then the counters agree with every answer."""
    with Ledger(target.ref) as setup, Ledger(target.ref) as purger:
        fresh = 0
        for round_no in range(ROUNDS):
            before = make_idle_keys(setup, target, round_no)
            purged, answers = race(purger, list(before), send, ready)
            fresh += check_round(target, before, purged, answers)
        made = sum(1 + j % 3 for j in range(KEYS)) * ROUNDS
        sent = KEYS * SENDERS * ROUNDS
        assert setup.counters() == {
            "attempts": made + sent,
            "deliveries": KEYS * ROUNDS + fresh,
            "duplicates": made - KEYS * ROUNDS + sent - fresh,
            "conflicts": 0,
        }
