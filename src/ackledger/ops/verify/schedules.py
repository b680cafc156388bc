"""The faults of one schedule, drawn from its seed alone.

A schedule is a few phases; each phase accepts its share of the events and has one fault
happen while the relay works on them. What is drawn (the kinds, their order, their counts and
delays) depends only on the seed and on which kinds the configuration allows, so the same
command with ``--seed S --schedules 1`` replays schedule S's faults. Where exactly a kill
lands in the work is the machine's doing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: The relay is stopped by its own drill after its N-th ACK, before that mark, and killed.
RELAY_ACK_MARK = "relay-kill-after-ack"
#: The proxy lets the sink commit and throws its answer away.
ANSWER_LOST = "answer-lost"
#: The sink (its process) is killed with SIGKILL while the relay sends: a drawn time after
#: it applied the first event of the phase.
SINK_KILL = "sink-kill"
#: The proxy cuts the connection in the middle of a batch's body.
CUT = "cut-mid-batch"
#: PostgreSQL, partitioned relay: a relay stopped after an ACK loses its lease to another.
LEASE_STEAL = "lease-steal"

KINDS = (RELAY_ACK_MARK, ANSWER_LOST, SINK_KILL, CUT, LEASE_STEAL)
#: The relay's batch: the most a fault may leave in flight.
BATCH = 4


@dataclass(frozen=True)
class Fault:
    kind: str
    #: RELAY_ACK_MARK, LEASE_STEAL: the ACK after which the relay stops; ANSWER_LOST: how many
    #: answers are dropped; CUT: at which event of a connection's stream it is cut.
    count: int
    #: SINK_KILL: how long after it applied the phase's first event the sink is killed.
    after_s: float

    def text(self) -> str:
        if self.kind == SINK_KILL:
            return f"{self.kind}@{self.after_s:.2f}s"
        return f"{self.kind}@{self.count}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[Fault, ...]

    def text(self) -> str:
        return ", ".join(fault.text() for fault in self.faults)


def draw(seed: int, kinds: tuple[str, ...]) -> Schedule:
    """Schedule ``seed``: two or three faults of the allowed ``kinds``."""
    if not kinds:
        raise ValueError("no fault kind applies to this configuration")
    rng = random.Random(seed)
    faults = []
    for _ in range(rng.randint(2, 3)):
        kind = rng.choice(kinds)
        count = rng.randint(1, 2) if kind == ANSWER_LOST else rng.randint(1, BATCH)
        faults.append(Fault(kind, count, round(rng.uniform(0.0, 0.4), 2)))
    return Schedule(seed, tuple(faults))


def kinds_for(
    *, own_sink: bool, http: bool, partitioned: bool, cut: bool | None = None
) -> tuple[str, ...]:
    """The faults that can be made here: a lost answer only on an HTTP sink behind the proxy,
    a cut wherever the proxy stands (``cut``: by default where ``http``), a sink kill only on
    the sink verify runs itself, a lease steal only where relays lease partitions."""
    allowed = [RELAY_ACK_MARK]
    if http:
        allowed.append(ANSWER_LOST)
    if http if cut is None else cut:
        allowed.append(CUT)
    if own_sink:
        allowed.append(SINK_KILL)
    if partitioned:
        allowed.append(LEASE_STEAL)
    return tuple(kind for kind in KINDS if kind in allowed)
