"""The selection's rows (``store/pending.py``): what ``dispatch_batch`` reads instead of the
parsed events, on every backend. A row answers as the stored event (without ``seq``), its id,
source and partitionkey from the columns, the rest from its text, parsed only when asked."""

from __future__ import annotations

import json

import pytest

from ackledger import Outbox
from ackledger.store.pending import PendingRow

from ..events import SOURCE, lab
from .conftest import Target


def _publish_two(ob: Outbox) -> None:
    ob.publish(lab("r-1", "pen", 3))  # a partitionkey (the sku) and a subject
    ob.publish({"type": "com.example.note", "id": "r-2", "data": {"text": "no key"}})


def test_a_row_answers_as_the_stored_event_and_parses_only_for_what_no_column_holds(
    target: Target,
) -> None:
    with Outbox(target.ref) as ob:
        _publish_two(ob)
        events = ob.pending()
        rows = ob.pending_rows(())
    stored = dict(target.rows("SELECT id, event FROM ackledger_outbox"))
    assert [type(row) for row in rows] == [PendingRow, PendingRow]
    assert [row.seq for row in rows] == [event["seq"] for event in events]
    keyed, plain = rows
    # The columns answer without a parse.
    assert (keyed["id"], keyed["source"], keyed.get("partitionkey")) == ("r-1", SOURCE, "pen")
    assert (plain.id, plain.get("source"), plain.get("partitionkey")) == ("r-2", ob.source, None)
    assert keyed.get("partitionkey", "-") == "pen" and plain.get("partitionkey", "-") == "-"
    assert keyed._parsed is None and plain._parsed is None
    # Everything else is the stored text's, seq left out.
    for row, event in zip(rows, events, strict=True):
        assert row.text == stored[row.id]
        assert dict(row) == json.loads(stored[row.id])
        assert dict(row) == {name: value for name, value in event.items() if name != "seq"}
    assert "partitionkey" in keyed and "partitionkey" not in plain and "seq" not in keyed
    assert keyed["subject"] == "pen" and plain.get("subject") is None
    assert sorted(plain.keys()) == sorted(json.loads(stored["r-2"]))


def test_the_trace_context_is_read_without_a_parse_only_where_the_text_lacks_it(
    target: Target,
) -> None:
    """Every send asks each row for ``traceparent`` and ``tracestate``; where the stored
    text does not even hold the quoted name, the answer is "none" without a parse. Where it
    does (the attribute, or the same word in the data), the parsed event answers."""
    parent = f"00-{'1' * 32}-{'2' * 16}-01"
    with Outbox(target.ref) as ob:
        ob.publish(lab("t-1", "pen", 3))
        ob.publish({**lab("t-2", "pen", 3), "traceparent": parent, "tracestate": "k=v"})
        ob.publish({"type": "com.example.note", "id": "t-3", "data": {"traceparent": "x"}})
        plain, traced, worded = ob.pending_rows(())
    assert plain.get("traceparent") is None and plain.get("tracestate", "-") == "-"
    assert plain._parsed is None
    assert (traced.get("traceparent"), traced.get("tracestate")) == (parent, "k=v")
    assert worded.get("traceparent") is None and worded._parsed is not None


def test_a_rows_copy_and_event_are_fresh_each_time(target: Target) -> None:
    with Outbox(target.ref) as ob:
        _publish_two(ob)
        (row, _) = ob.pending_rows(())
    first, second = row.copy_event(), row.copy_event()
    first["data"]["qty"] = 999
    assert second["data"]["qty"] == 3 and row["data"]["qty"] == 3
    assert "seq" not in first
    event = row.event()
    assert event["seq"] == row.seq and event.text == row.text
    event["data"]["qty"] = 7
    assert row.event()["data"]["qty"] == 3 and row["data"]["qty"] == 3


def test_pending_rows_skips_what_it_is_told_and_keeps_the_limit(target: Target) -> None:
    with Outbox(target.ref) as ob:
        for n in range(5):
            ob.publish(lab(f"k-{n}", "pen", 1))
        assert [row.id for row in ob.pending_rows({"k-0", "k-2"}, 2)] == ["k-1", "k-3"]
        # An id that is not pending (its mark landed meanwhile) leaves the limit as it is.
        assert [row.id for row in ob.pending_rows({"gone", "k-1"}, 2)] == ["k-0", "k-2"]
        assert [row.id for row in ob.pending_rows((), 3)] == ["k-0", "k-1", "k-2"]
        assert [event["id"] for event in ob.pending_beyond({"k-1"}, 2)] == ["k-0", "k-2"]


def test_a_stored_text_not_of_publishs_form_parses_or_fails_as_json_loads_would() -> None:
    # The fast parse reads publish's canonical text directly; anything else (a row edited by
    # hand) must parse, or fail, exactly as json.loads does, never half-read.
    def row(text: str) -> PendingRow:
        return PendingRow((1, "e-1", SOURCE, None, text))

    spaced = ' {"id": "e-1", "data": {"n": [1, 2]}} '
    assert row(spaced).copy_event() == json.loads(spaced)
    assert row(spaced)["data"] == {"n": [1, 2]}
    for junk in ('{"id":"e-1"} {"id":"e-2"}', '{"id":"e-1"}x', "", '{"id":', "[1]", "{}\n"):
        try:
            expected: object = json.loads(junk)
        except ValueError as refused:
            with pytest.raises(type(refused)):
                row(junk).copy_event()
        else:
            assert row(junk).copy_event() == expected
