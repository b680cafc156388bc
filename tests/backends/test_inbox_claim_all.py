"""Groups of events claimed all at once (``store.claims.claim_all``) give exactly the outcomes,
receipts, arrival numbers, stock and counters of applying the events one by one, on every
backend; a conflict stops its run and gives back the claims made beyond it, leaving the rest
of that run un-applied and the other runs as they would be alone.

The expected state comes from a small model of the contract (``Model``), not from the code.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ackledger import Conflict, Inbox, InvalidEvent
from ackledger.envelope import validate_cloudevent
from ackledger.sink.inbox import BatchResult
from ackledger.store.keys import MANY

from ..events import SOURCE, lab
from .conftest import Target


def ev(event_id: str, qty: int = 2, sku: str = "apple") -> dict[str, Any]:
    return lab(event_id, sku, qty)


def validate_event(item: object) -> dict[str, Any]:
    """The flat order of a valid lab event (InvalidEvent for an invalid one)."""
    clean = validate_cloudevent(item)
    return {"id": clean["id"], **clean["data"]}


@dataclass
class Model:
    """The contract, one event at a time: what the inbox must hold after each group."""

    #: id -> [sku, qty, receipts, arrival, last_arrival]
    inbox: dict[str, list[Any]] = field(default_factory=dict)
    stock: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {"applied": 0, "duplicate": 0, "conflict": 0}
    )
    arrival: int = 0

    def group(self, runs: list[list[Any]]) -> list[tuple[list[str], str | None]]:
        # A group takes one block of arrival numbers, one for each event of its runs with no
        # invalid event (a run is validated whole: one invalid event refuses all of it);
        # events after a conflict leave theirs unused.
        block_end = self.arrival + sum(len(self._valid(run)) for run in runs)
        answers: list[tuple[list[str], str | None]] = []
        for run in runs:
            statuses: list[str] = []
            error: str | None = None
            if not self._valid(run):
                answers.append((statuses, "invalid"))
                continue
            for item in run:
                clean = validate_event(item)
                self.arrival += 1
                row = self.inbox.get(clean["id"])
                if row is None:
                    self.inbox[clean["id"]] = [
                        clean["sku"], clean["qty"], 1, self.arrival, self.arrival
                    ]  # fmt: skip
                    self.stock[clean["sku"]] = self.stock.get(clean["sku"], 0) + clean["qty"]
                    self.counts["applied"] += 1
                    statuses.append("applied")
                elif row[:2] == [clean["sku"], clean["qty"]]:
                    row[2] += 1
                    row[4] = self.arrival
                    self.counts["duplicate"] += 1
                    statuses.append("duplicate")
                else:
                    self.counts["conflict"] += 1
                    error = "conflict"
                    break
            answers.append((statuses, error))
        self.arrival = block_end
        return answers

    @staticmethod
    def _valid(run: list[Any]) -> list[Any]:
        """The run, or nothing when any of its events is invalid."""
        for item in run:
            try:
                validate_event(item)
            except InvalidEvent:
                return []
        return run


def _answers(results: list[BatchResult]) -> list[tuple[list[str], str | None]]:
    def kind(error: Exception | None) -> str | None:
        if error is None:
            return None
        return "conflict" if isinstance(error, Conflict) else "invalid"

    return [(r.statuses, kind(r.error)) for r in results]


def _check(target: Target, inbox: Inbox, model: Model) -> None:
    target_rows = target.rows
    rows = target_rows(
        "SELECT id, receipts, arrival, last_arrival, source, type FROM ackledger_inbox"
    )
    assert {r[0]: [int(r[1]), int(r[2]), int(r[3])] for r in rows} == {
        event_id: row[2:] for event_id, row in model.inbox.items()
    }
    assert {(r[4], r[5]) for r in rows} <= {(SOURCE, "warehouse.stock.added")}
    # The lab's table is there once a lab event was taken in, even one that changed nothing.
    rows = target_rows("SELECT sku, qty FROM inventory") if target.has_table("inventory") else []
    stock = {str(sku): int(qty) for sku, qty in rows}
    assert stock == {sku: qty for sku, qty in model.stock.items() if qty}
    assert inbox.counters() == model.counts


def _replay(target: Target, groups: list[list[list[Any]]]) -> None:
    model = Model()
    with Inbox(target.ref) as inbox:
        for runs in groups:
            assert _answers(inbox.receive_runs(runs)) == model.group(runs)
            _check(target, inbox, model)


def test_a_conflict_in_the_middle_of_a_batch_leaves_the_rest_unapplied(target: Target) -> None:
    _replay(
        target,
        [
            [[ev("old", 1)]],
            [[ev("b1"), ev("b2", 3), ev("old", 9), ev("b3"), ev("b4")]],
            # The same ids again: b3 and b4 were never applied, so now they are.
            [[ev("b3"), ev("b2", 3), ev("b4")]],
        ],
    )


def test_a_conflict_in_one_run_leaves_the_other_runs_of_the_group_alone(target: Target) -> None:
    _replay(
        target,
        [
            [[ev("old", 1)]],
            [
                [ev("r1a"), ev("r1b")],
                [ev("r2a"), ev("old", 5), ev("r2b")],
                [ev("r3a"), ev("r2b", 7), ev("old", 1)],
            ],
        ],
    )


def test_duplicates_inside_a_batch_and_across_batches(target: Target) -> None:
    _replay(
        target,
        [
            [[ev("a"), ev("b", 3), ev("a"), ev("c", sku="pear"), ev("a")]],
            [[ev("c", sku="pear"), ev("d"), ev("b", 3)], [ev("d"), ev("e")]],
            # One id with two contents in one batch: the second is a conflict.
            [[ev("f"), ev("g"), ev("f", 5), ev("h")]],
        ],
    )


def test_groups_larger_than_one_claim_statement(target: Target) -> None:
    size = MANY + MANY // 2
    first = [[ev(f"e{n}", 1 + n % 3, f"sku{n % 5}") for n in range(k, k + 16)] for k in (0, 16)]
    # Re-sends spread over both statements of the claim and of the look-up of known ids.
    again = [ev(f"e{n}", 1 + n % 3, f"sku{n % 5}") for n in range(size)]
    runs = [again[k : k + 16] for k in range(0, size, 16)]
    _replay(target, [first, runs, [again[::-1]]])


def test_an_invalid_item_refuses_its_run_whole_before_the_claim(target: Target) -> None:
    _replay(
        target,
        [[[ev("a"), ev("b"), {"id": "c"}, ev("d")], [ev("b"), ev("e")], [{"id": "x"}]]],
    )


def _counter_totals(target: Target) -> dict[str, int]:
    """The counters table read independently, a PostgreSQL counter's spread rows summed."""
    totals: dict[str, int] = {}
    for name, value in target.rows("SELECT name, value FROM ackledger_counters"):
        short = str(name).split("#", 1)[0]
        totals[short] = totals.get(short, 0) + int(value)
    return totals


def test_receive_runs_keeps_each_run_to_itself(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        results = inbox.receive_runs(
            [
                [ev("a", 2, "s"), ev("b", 3, "s")],
                [ev("a", 2, "s"), ev("a", 9, "s"), ev("c", 100, "s")],
                [ev("d", 4, "s"), {**ev("e", 1, "s"), "data": {"sku": "s"}}, ev("f", 100, "s")],
                [ev("g", 5, "other")],
            ]
        )
    assert [r.statuses for r in results] == [
        ["applied", "applied"],
        ["duplicate"],
        [],  # validated whole: its invalid event refuses all of it
        ["applied"],
    ]
    assert results[0].error is None
    assert isinstance(results[1].error, Conflict)
    assert isinstance(results[2].error, InvalidEvent)
    assert results[3].error is None
    stock = {str(sku): int(qty) for sku, qty in target.rows("SELECT sku, qty FROM inventory")}
    assert stock == {"s": 5, "other": 5}
    assert {r[0] for r in target.rows("SELECT id FROM ackledger_inbox")} == {"a", "b", "g"}
    counters = _counter_totals(target)
    counters.pop("sink.arrival")  # the arrival sequence (numbers for every item offered)
    assert counters == {"sink.applied": 3, "sink.duplicate": 1, "sink.conflict": 1}


def test_receive_runs_with_nothing_valid_writes_nothing(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        (result,) = inbox.receive_runs([[{"id": "x"}]])
    assert result.statuses == []
    assert isinstance(result.error, InvalidEvent)
    assert target.rows("SELECT count(*) FROM ackledger_counters") == [(0,)]


ID = st.sampled_from(["a", "b", "c", "d", "e", "f"])
ITEM = st.builds(ev, ID, st.sampled_from([1, 2]), st.sampled_from(["apple", "pear"]))
RUN = st.lists(st.one_of(ITEM, ITEM, ITEM, st.just({"id": "bad"})), min_size=1, max_size=6)
GROUPS = st.lists(st.lists(RUN, min_size=1, max_size=4), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(GROUPS)
def test_any_groups_match_the_model_on_sqlite(groups: list[list[list[Any]]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _replay(Target("sqlite", str(Path(folder) / "sink.db")), groups)
