"""CONTRACT v2 section 3: the outbox's stored source and ``publish`` of any CloudEvent, on every
backend."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pytest

from ackledger import Conflict, EventTypes, InvalidEvent, Outbox
from ackledger.relay.partitions import PartitionLeases

from .conftest import Target

TYPE = "com.example.order.placed"


def nested_data() -> dict[str, Any]:
    """Over 1 KiB of nested JSON: objects in lists in objects, every JSON kind of value."""
    lines = [
        {"n": n, "label": f"line-{n:02d}-" + "x" * 24, "tags": ["a", "b"], "price": n + 0.25}
        for n in range(12)
    ]
    data = {"lines": lines, "meta": {"deep": [1, [2, {"k": None, "ok": True, "no": False}]]}}
    assert len(json.dumps(data)) > 1024
    return data


def order(event_id: str, **attributes: Any) -> dict[str, Any]:
    """A generic event without specversion or source (the outbox fills them in)."""
    return {"type": TYPE, "id": event_id, **attributes}


def test_a_fresh_outbox_makes_its_source_once_and_keeps_it(target: Target) -> None:
    with Outbox(target.ref) as ob:
        made = ob.source
    assert made.startswith("urn:ackledger:")
    assert str(uuid.UUID(made.removeprefix("urn:ackledger:"))) == made.removeprefix(
        "urn:ackledger:"
    )
    assert target.rows("SELECT name, value FROM ackledger_meta") == [("outbox.source", made)]
    with Outbox(target.ref) as again, Outbox(target.ref, source=made) as named:
        assert again.source == named.source == made
    before = target.dump()
    with pytest.raises(ValueError, match="source"):
        Outbox(target.ref, source="urn:shop:orders")
    assert target.dump() == before


def test_two_fresh_outboxes_get_two_sources(target: Target, tmp_path: Any) -> None:
    with Outbox(target.ref) as one, Outbox(tmp_path / "other.db") as two:
        assert one.source != two.source


def test_a_given_source_is_stored_and_stamped_on_what_it_publishes(target: Target) -> None:
    with Outbox(target.ref, source="/orders-service") as ob:
        assert ob.source == "/orders-service"
        ob.publish(order("e1"))
        ob.accept({"id": "o1", "sku": "snack-7", "qty": 3})
    assert target.rows("SELECT value FROM ackledger_meta WHERE name = 'outbox.source'") == [
        ("/orders-service",)
    ]
    assert target.rows("SELECT id, source FROM ackledger_outbox ORDER BY seq") == [
        ("e1", "/orders-service"),
        ("o1", "/orders-service"),
    ]
    with Outbox(target.ref) as reopened:
        assert reopened.source == "/orders-service"
    with pytest.raises(ValueError, match="source"):
        Outbox(target.ref, source="/another-service")


def test_an_invalid_source_is_refused_before_anything_is_made(target: Target) -> None:
    for bad in ("", "x" * 257):
        with pytest.raises(InvalidEvent, match="source"):
            Outbox(target.ref, source=bad)


def test_publish_keeps_a_generic_event_whole(target: Target) -> None:
    data = nested_data()
    with Outbox(target.ref) as ob:
        event = order("e1", data=data, subject="cart-9", partitionkey="customer-7", shop="north")
        seq = ob.publish(event)
        (item,) = ob.pending()
        assert item == {**event, "specversion": "1.0", "source": ob.source, "seq": seq}
        assert item["data"] == data
        assert event == order(
            "e1", data=data, subject="cart-9", partitionkey="customer-7", shop="north"
        )
    stored = target.rows("SELECT id, type, subject, partitionkey, data FROM ackledger_outbox")
    assert stored == [
        (
            "e1",
            TYPE,
            "cart-9",
            "customer-7",
            json.dumps(data, sort_keys=True, separators=(",", ":")),
        )
    ]


def test_publish_again_is_the_same_seq_and_other_content_a_conflict(target: Target) -> None:
    with Outbox(target.ref) as ob:
        seq = ob.publish(order("e1", data=nested_data()))
        ob.publish(order("e2"))
        before = target.dump()
        # The same identity and content: the same event, whatever time or key order it has.
        assert ob.publish(order("e1", data=nested_data())) == seq
        assert (
            ob.publish(
                {"source": ob.source, "specversion": "1.0", **order("e1", data=nested_data())}
            )
            == seq
        )
        assert ob.publish(order("e1", data=nested_data(), time="2026-01-01T00:00:00Z")) == seq
        assert target.dump() == before
        changed = nested_data()
        changed["lines"][5]["tags"].append("c")
        for other in (
            order("e1", data=changed),
            order("e1", data=nested_data(), subject="other"),
            {**order("e1", data=nested_data()), "type": "com.example.order.cancelled"},
        ):
            with pytest.raises(Conflict, match="e1"):
                ob.publish(other)
        with pytest.raises(Conflict), ob.transaction() as tx:
            tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('mine', 1)")
            tx.publish(order("e1", data=changed))
        assert target.dump() == before


def test_publish_fills_in_specversion_and_source_only_when_missing(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.publish(order("e1"))
        ob.publish({**order("e2"), "source": "/elsewhere"})
        ob.publish({**order("e3"), "specversion": "1.0"})
        items = ob.pending()
    assert [(i["id"], i["specversion"], i["source"]) for i in items] == [
        ("e1", "1.0", ob.source),
        ("e2", "1.0", "/elsewhere"),
        ("e3", "1.0", ob.source),
    ]


#: Events publish refuses, with the attribute each refusal names.
INVALID: list[tuple[object, str]] = [
    ({"id": "e9"}, "type"),
    (order("bad\tid"), "id"),
    (order("e9", specversion="0.3"), "specversion"),
    (order("e9", datacontenttype="text"), "datacontenttype"),
    (order("e9", time="yesterday"), "time"),
    (order("e9", subject=""), "subject"),
    (order("e9", partitionkey="x" * 257), "partitionkey"),
    (order("e9", source=""), "source"),
    (order("e9", Shop="north"), "Shop"),
    (order("e9", data={"total": math.nan}), "data.total"),
    (order("e9", data={"lines": [{1: "x"}]}), "data.lines[0]"),
    ({"type": "warehouse.stock.added", "id": "e9", "data": {"sku": "s", "qty": 0}}, "data.qty"),
    # A valid CloudEvents extension name, but pending() hands every event on with its row
    # number under it: the event's own value would be replaced, then dropped on the wire.
    (order("e9", seq=5), "seq"),
]


def test_an_invalid_event_is_refused_naming_the_attribute_and_writes_nothing(
    target: Target,
) -> None:
    with Outbox(target.ref) as ob:
        ob.publish(order("seed"))
        before = target.dump()
        for bad, attribute in INVALID:
            with pytest.raises(InvalidEvent) as refused:
                ob.publish(bad)
            assert refused.value.field == attribute, bad
            with pytest.raises(InvalidEvent), ob.transaction() as tx:
                tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('mine', 1)")
                tx.publish(bad)
            assert target.dump() == before, bad


def check_order(data: Any) -> Any:
    if not isinstance(data, dict) or set(data) != {"total"}:
        raise InvalidEvent("total: an order has exactly a total", field="total")
    if not isinstance(data["total"], int) or data["total"] < 0:
        raise InvalidEvent("total: must be a non-negative int", field="total")
    return data


def test_a_registered_type_is_checked_by_its_schema_at_publish(target: Target) -> None:
    types = EventTypes()
    types.register(TYPE, check_order)
    with Outbox(target.ref, types=types) as ob:
        ob.publish(order("e1", data={"total": 12}))
        before = target.dump()
        with pytest.raises(InvalidEvent, match="schema") as refused:
            ob.publish(order("e2"))  # a type with a schema needs its data
        assert refused.value.field == "data"
        for bad in ({"total": -1}, {"total": "12"}, {"sum": 12}):
            with pytest.raises(InvalidEvent, match="total") as refused:
                ob.publish(order("e2", data=bad))
            assert str(refused.value.field).startswith("data"), bad
        assert target.dump() == before
        # Another type has no schema here: carried as it is.
        ob.publish({"type": "com.example.other", "id": "e3", "data": {"anything": [1]}})
        assert [item["id"] for item in ob.pending()] == ["e1", "e3"]
    with Outbox(target.ref) as untyped:  # the same event without the schema goes in
        untyped.publish(order("e2", data={"sum": 12}))
    assert target.rows("SELECT id, data FROM ackledger_outbox ORDER BY seq") == [
        ("e1", '{"total":12}'),
        ("e3", '{"anything":[1]}'),
        ("e2", '{"sum":12}'),
    ]


def test_seq_order_is_kept_per_partitionkey(target: Target) -> None:
    keys = ["b", None, "a", "b", "a", None, "b"]
    with Outbox(target.ref) as ob:
        for n, key in enumerate(keys):
            extra = {} if key is None else {"partitionkey": key}
            ob.publish(order(f"{99 - n}-{key}", **extra))  # ids sort against seq order
        leases = PartitionLeases(ob, "observer")
        by_partition = {
            key: [item["id"] for item in leases.pending_in_partition(key)] for key in ("a", "b", "")
        }
        everything = [item["id"] for item in ob.pending()]
    assert by_partition == {
        "a": ["97-a", "95-a"],
        "b": ["99-b", "96-b", "93-b"],
        "": ["98-None", "94-None"],
    }
    assert everything == [f"{99 - n}-{key}" for n, key in enumerate(keys)]
    assert target.rows("SELECT id, partition_key, partitionkey FROM ackledger_outbox ORDER BY seq")[
        1
    ] == (
        "98-None",
        "",
        None,
    )
