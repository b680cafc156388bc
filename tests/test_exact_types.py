"""The Python API trusts only exact types: an ``int`` subclass with its own comparisons, a
number past SQL's 64 bits, a ``dict`` subclass hiding its items: each is refused with a
contract error naming the field, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ackledger import InvalidEvent, Ledger, Outbox, validate_event, warehouse
from ackledger.event import check_identifier
from ackledger.sink.inbox import Inbox
from ackledger.source.dispatch import dispatch
from tests.conftest import raw_rows


class AlwaysInRange(int):
    """An int whose comparisons always say "in range": ``1 <= x <= MAX`` holds for any value."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


class HidingDict(dict[str, Any]):
    """A dict whose items() shows nothing: a check that walks items() sees an empty object,
    while json.dumps (and dict()) still write every key."""

    def items(self) -> Any:
        return iter(())


class LongStr(str):
    def __len__(self) -> int:
        return 1


def _event(qty: object, event_id: str = "e-1") -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": "/shop",
        "type": warehouse.TYPE,
        "data": {"sku": "pen", "qty": qty},
    }


@pytest.mark.parametrize("qty", [AlwaysInRange(-5), AlwaysInRange(10**9), 2**63, True, 1.0])
def test_validate_event_refuses_a_qty_that_is_not_an_exact_int_in_range(qty: object) -> None:
    with pytest.raises(InvalidEvent) as refused:
        validate_event(_event(qty))
    assert refused.value.field == "data.qty"


@pytest.mark.parametrize("qty", [AlwaysInRange(-5), AlwaysInRange(10**9), 2**63, True])
def test_the_v1_order_check_refuses_them_too(qty: object) -> None:
    with pytest.raises(InvalidEvent, match="qty"):
        warehouse.validate({"id": "o-1", "sku": "pen", "qty": qty})


@pytest.mark.parametrize("qty", [AlwaysInRange(-5), 2**63])
def test_outbox_and_inbox_write_nothing_for_them(tmp_path: Path, qty: object) -> None:
    with Outbox(tmp_path / "out.db") as outbox:
        with pytest.raises(InvalidEvent, match="qty"):
            outbox.accept({"id": "o-1", "sku": "pen", "qty": qty})
        with pytest.raises(InvalidEvent, match="qty"):
            outbox.publish(_event(qty))
    with Inbox(tmp_path / "in.db") as inbox, pytest.raises(InvalidEvent, match="qty"):
        inbox.receive(_event(qty))
    assert raw_rows(tmp_path / "out.db", "SELECT COUNT(*) FROM ackledger_outbox") == [(0,)]
    assert raw_rows(tmp_path / "in.db", "SELECT COUNT(*) FROM ackledger_inbox") == [(0,)]
    # Nothing was applied: not even the lab's tables were made.
    assert (
        raw_rows(tmp_path / "in.db", "SELECT name FROM sqlite_master WHERE name = 'inventory'")
        == []
    )


def test_the_ledger_payload_is_refused_as_a_dict_subclass(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        payloads: list[Any] = [
            HidingDict(secret=object()),  # json.dumps would fail only after the check passed
            {"nested": HidingDict(n=1)},
            {"n": AlwaysInRange(3)},
            {"items": type("MyList", (list,), {})([1])},
            {LongStr("k"): 1},
        ]
        for payload in payloads:
            with pytest.raises(InvalidEvent) as refused:
                ledger.request("case", "work", "pod", "idempotent", payload)
            assert refused.value.field == "payload"
    assert raw_rows(tmp_path / "ledger.db", "SELECT COUNT(*) FROM ackledger_deliveries") == [(0,)]


@pytest.mark.parametrize("limit", [AlwaysInRange(10**6), True, 2**63, 16.0])
def test_limits_are_exact_ints(tmp_path: Path, limit: Any) -> None:
    with Outbox(tmp_path / "out.db") as outbox:
        with pytest.raises(ValueError, match="limit"):
            outbox.pending(limit)
        with pytest.raises(ValueError, match="limit"):
            outbox.pending_listing(limit)
        with pytest.raises(ValueError, match="limit"):
            dispatch(outbox, lambda event: None, limit)


@pytest.mark.parametrize("seconds", [AlwaysInRange(-1), True, 2**1100])
def test_ages_are_exact_numbers(tmp_path: Path, seconds: Any) -> None:
    with Outbox(tmp_path / "out.db") as outbox, pytest.raises(ValueError, match="older_than"):
        outbox.purge(seconds)
    with Ledger(tmp_path / "ledger.db") as ledger, pytest.raises(ValueError, match="older_than"):
        ledger.purge(seconds)


def test_an_identifier_is_judged_by_its_characters_not_its_len() -> None:
    with pytest.raises(InvalidEvent, match="1-8 characters"):
        check_identifier(LongStr("a" * 9), "id", 8)
    assert type(check_identifier(LongStr("abc"), "id", 8)) is str
