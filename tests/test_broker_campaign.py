"""The seeded kill -9 campaign, small: 3 schedules x 100 events per broker.

Real processes (``ackledger relay --batch`` and ``ackledger consume``) killed with SIGKILL at
the seed's times, real RabbitMQ and NATS JetStream, SQLite outbox and inbox read afterwards on
connections of their own. ``python -m bench.broker_campaign`` runs the full size (20 x 500);
``--seed N`` replays any one schedule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.broker_campaign import LIMIT, Kill, Outcome, run_schedule, schedule

SEEDS = (1, 2, 3)
EVENTS = 100


def test_a_schedule_is_drawn_from_its_seed_alone() -> None:
    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)
    for kill in schedule(7):
        assert isinstance(kill, Kill) and kill.target in ("relay", "consumer", "both")
        assert 0.5 <= kill.after_s <= 2.0 and 1 <= kill.after_marks <= 4 * LIMIT


def test_the_campaign_judges_a_wrong_outcome_wrong() -> None:
    clean = Outcome("amqp", 1, 10, in_flight=[3, 16], resends=19, consumer_exit=0)
    assert clean.problems == []
    assert Outcome("amqp", 1, 10, lost=1, consumer_exit=0).problems == ["lost 1"]
    assert Outcome("amqp", 1, 10, double_applied=2, consumer_exit=0).problems == [
        "double-applied 2"
    ]
    assert Outcome("amqp", 1, 10, stuck=1, consumer_exit=0).problems == ["stuck 1"]
    # More re-sent than the kills left in flight, or a kill with more than a batch in flight.
    assert Outcome("amqp", 1, 10, in_flight=[2], resends=3, consumer_exit=0).problems
    assert Outcome("amqp", 1, 10, in_flight=[LIMIT + 1], resends=0, consumer_exit=0).problems
    assert Outcome("amqp", 1, 10, consumer_exit=-15).problems


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("broker", ["amqp", "nats"])
def test_relay_and_consumer_killed_at_random_lose_nothing_and_apply_once(
    tmp_path: Path, broker: str, seed: int
) -> None:
    outcome = run_schedule(broker, seed, EVENTS, tmp_path)
    kills = schedule(seed)
    assert outcome.relay_kills == sum(kill.target in ("relay", "both") for kill in kills)
    assert outcome.consumer_kills == sum(kill.target in ("consumer", "both") for kill in kills)
    assert (outcome.lost, outcome.double_applied, outcome.stuck) == (0, 0, 0)
    assert len(outcome.in_flight) == outcome.relay_kills
    assert all(count <= LIMIT for count in outcome.in_flight)  # one batch in flight at most
    assert outcome.resends <= sum(outcome.in_flight)
    assert outcome.consumer_exit == 0
    if broker == "amqp":
        # RabbitMQ keeps every re-send: the inbox absorbs each as a duplicate (and the
        # redeliveries after a consumer kill on top).
        assert outcome.inbox_duplicates >= outcome.resends
    assert outcome.problems == []


def test_a_pipelined_relay_may_leave_two_batches_in_flight_and_no_more() -> None:
    two = Outcome("amqp", 1, 10, in_flight=[2 * LIMIT], resends=2 * LIMIT, consumer_exit=0,
                  bound=2 * LIMIT)  # fmt: skip
    assert two.problems == []
    assert Outcome("amqp", 1, 10, in_flight=[2 * LIMIT + 1], consumer_exit=0,
                   bound=2 * LIMIT).problems  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seed", (2, 4))
@pytest.mark.parametrize("broker", ["amqp", "nats"])
def test_the_leased_pipeline_killed_at_random_loses_nothing_and_applies_once(
    tmp_path: Path, broker: str, seed: int
) -> None:
    """``relay --batch --pipeline`` on a PostgreSQL outbox's leased partitions: a kill leaves
    at most the batch being sent and the one whose marks were being committed."""
    outcome = run_schedule(broker, seed, EVENTS, tmp_path, leased_pipeline=True)
    kills = schedule(seed)
    assert outcome.relay_kills == sum(kill.target in ("relay", "both") for kill in kills)
    assert (outcome.lost, outcome.double_applied, outcome.stuck) == (0, 0, 0)
    assert len(outcome.in_flight) == outcome.relay_kills
    assert all(count <= 2 * LIMIT for count in outcome.in_flight)
    assert outcome.resends <= sum(outcome.in_flight)
    assert outcome.problems == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", (3, 5))
@pytest.mark.parametrize("broker", ["amqp", "nats"])
def test_the_leased_relay_with_batches_in_flight_killed_at_random_loses_nothing(
    tmp_path: Path, broker: str, seed: int
) -> None:
    """``relay --batch --inflight 4`` on a PostgreSQL outbox's leased partitions: a kill leaves
    at most the four batches published and not yet marked."""
    outcome = run_schedule(broker, seed, EVENTS, tmp_path, inflight=4)
    kills = schedule(seed)
    assert outcome.bound == 4 * LIMIT
    assert outcome.relay_kills == sum(kill.target in ("relay", "both") for kill in kills)
    assert (outcome.lost, outcome.double_applied, outcome.stuck) == (0, 0, 0)
    assert len(outcome.in_flight) == outcome.relay_kills
    assert all(count <= 4 * LIMIT for count in outcome.in_flight)
    assert outcome.resends <= sum(outcome.in_flight)
    assert outcome.problems == []
