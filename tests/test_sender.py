"""``ackledger.sender``: the one way the relay builds a sender from a URL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ackledger
from ackledger import NotAcknowledged, UnsafeTarget, dispatch_batch
from ackledger.envelope import canonical_json
from ackledger.source.dispatch import own_stored, own_stored_event
from ackledger.wire import sender as sender_module
from ackledger.wire.http import close_connections
from ackledger.wire.sender import HttpSender, Refusal, Sender
from ackledger.wire.stored import stored_event_sender
from tests.events import SOURCE, lab
from tests.rawserver import RawServer, forbid_network, header, http_answer
from tests.stored_events import LOOSE_ID, loosen, stored_events, stored_outbox

BATCH = [lab(f"b-{i}", "s", 1) for i in range(3)]


@pytest.fixture(autouse=True)
def fresh_connections() -> Iterator[None]:
    close_connections()
    yield
    close_connections()


def answer(payload: object, status: int = 200) -> bytes:
    return http_answer(status, json.dumps(payload).encode())


def acks(*ids: str) -> list[dict[str, object]]:
    return [{"id": i, "source": SOURCE, "ack": True, "status": "applied"} for i in ids]


def refusing_b1(error: dict[str, object] | None) -> bytes:
    payload: dict[str, object] = {
        "acks": [*acks("b-0"), {"id": "b-1", "source": SOURCE, "ack": False}]
    }
    if error is not None:
        payload["error"] = error
    return answer(payload)


def test_sender_is_a_top_level_name() -> None:
    assert "sender" in ackledger.__all__
    assert ackledger.sender is sender_module.sender


def test_send_returns_true_for_the_exact_ack() -> None:
    def ack(body: bytes) -> bytes:
        event = json.loads(body)
        return answer({"ack": True, "id": event["id"], "source": event["source"]})

    with RawServer(ack) as server:
        sender = ackledger.sender(server.url)
        assert isinstance(sender, HttpSender)
        assert sender.send(BATCH[0]) is True
        assert json.loads(server.requests[0]) == BATCH[0]
        assert sender.refusal is None


def test_a_refused_batch_item_is_kept_until_the_next_send_batch() -> None:
    answers = iter(
        [
            refusing_b1({"status": 422, "detail": "qty: conflict", "title": "Conflict"}),
            answer({"acks": acks("b-0", "b-1", "b-2")}),
        ]
    )
    with RawServer(lambda body: next(answers)) as server:
        sender = ackledger.sender(server.url)
        assert sender.send_batch(BATCH) == 1
        assert sender.refusal == Refusal("b-1", 422, "qty: conflict")
        assert sender.refusal == Refusal("b-1", 422, "qty: conflict")  # reading keeps it
        assert sender.send_batch(BATCH) == 3
        assert sender.refusal is None
        assert [json.loads(body) for body in server.requests] == [BATCH, BATCH]


def test_a_send_batch_that_raises_forgets_the_earlier_refusal() -> None:
    answers = iter([refusing_b1({"status": 422, "detail": "no"}), answer({"detail": "x"}, 500)])
    with RawServer(lambda body: next(answers)) as server:
        sender = ackledger.sender(server.url)
        assert sender.send_batch(BATCH) == 1
        assert sender.refusal is not None
        with pytest.raises(NotAcknowledged, match="500"):
            sender.send_batch(BATCH)
        assert sender.refusal is None


@pytest.mark.parametrize(
    ("error", "refusal"),
    [
        ({"status": 409, "title": "Conflict"}, Refusal("b-1", 409, "Conflict")),
        ({"status": "422", "detail": "qty"}, Refusal("b-1", None, "qty")),
        ({"status": True, "detail": "qty"}, Refusal("b-1", None, "qty")),
        (None, Refusal("b-1", None, "not acknowledged")),
    ],
    ids=["title-only", "status-not-int", "status-bool", "no-error"],
)
def test_the_refusal_takes_what_the_problem_gives(
    error: dict[str, object] | None, refusal: Refusal
) -> None:
    with RawServer(lambda body: refusing_b1(error)) as server:
        sender = ackledger.sender(server.url)
        assert sender.send_batch(BATCH) == 1
        assert sender.refusal == refusal


def test_close_releases_the_kept_connection() -> None:
    def ack(body: bytes) -> bytes:
        event = json.loads(body)
        return answer({"ack": True, "id": event["id"], "source": event["source"]})

    with RawServer(ack) as server:
        sender = ackledger.sender(server.url)
        assert sender.send(BATCH[0]) is True
        assert sender.send(BATCH[1]) is True
        assert server.connections == 1
        sender.close()
        assert sender.send(BATCH[2]) is True
        assert server.connections == 2


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    return forbid_network(monkeypatch)


@pytest.mark.parametrize(
    "url",
    [
        # amqp:// and nats:// are schemes of their own now: their own tests refuse bad URLs.
        "ftp://127.0.0.1/events",
        "file:///events",
        "127.0.0.1/events",
        "",
    ],
)
def test_an_unknown_scheme_is_refused_before_any_connection(
    url: str, no_network: list[object]
) -> None:
    with pytest.raises(UnsafeTarget, match="scheme"):
        ackledger.sender(url)
    assert no_network == []


@pytest.mark.parametrize(
    "url",
    [
        "http://sink.invalid/events",
        "http://sink.invalid:8080/events",
        "https://sink.invalid/events",
        "http://127.0.0.1@sink.invalid/events",
        "https://127.0.0.1/events",
        "http://127.0.0.1/other#x",
    ],
)
def test_an_unsafe_http_target_is_refused_before_any_connection(
    url: str, no_network: list[object]
) -> None:
    with pytest.raises(UnsafeTarget):
        ackledger.sender(url)
    assert no_network == []


def test_an_explicit_allow_list_reaches_the_sender(no_network: list[object]) -> None:
    built = ackledger.sender("http://sink.invalid:81/events", allowed_hosts=["sink.invalid"])
    assert isinstance(built, HttpSender)
    assert built.batch_url == "http://sink.invalid:81/events/batch"
    assert no_network == []


def test_a_non_string_url_and_a_bad_timeout_are_refused() -> None:
    with pytest.raises(UnsafeTarget):
        ackledger.sender(b"http://127.0.0.1/events")
    with pytest.raises(ValueError, match="timeout"):
        ackledger.sender("http://127.0.0.1/events", timeout=0)


def _acks_all(body: bytes) -> bytes:
    """A sink's batch answer acknowledging every event of the batch, in order."""
    acks = [{"ack": True, "id": e["id"], "source": e["source"]} for e in json.loads(body)]
    return http_answer(200, json.dumps({"acks": acks}).encode())


def test_an_http_batch_from_the_outbox_carries_the_stored_text_and_a_wrapper_copies(
    tmp_path: Path,
) -> None:
    """``relay --batch``'s own HTTP sender posts the outbox's stored text as it is (one
    event's was rewritten with a space: the same JSON, other bytes); a wrapper gets copies,
    which the sender validates and encodes."""
    ids = [e["id"] for e in stored_events()]
    with RawServer(_acks_all) as server:
        wire = ackledger.sender(server.url)
        try:
            for name, send in (("stored", wire.send_batch), ("copies", _wrapped(wire))):
                path = tmp_path / f"{name}.db"
                with stored_outbox(path) as outbox:
                    loose = loosen(path)
                    assert dispatch_batch(outbox, send) == ids
                    assert outbox.pending() == []
        finally:
            wire.close()
        stored_body, copied_body = server.requests
    assert json.loads(stored_body) == json.loads(copied_body)
    assert loose in stored_body
    assert loose not in copied_body
    assert canonical_json(json.loads(loose)).encode() in copied_body


def _wrapped(wire: Sender) -> Callable[[list[dict[str, Any]]], int]:
    def send(events: list[dict[str, Any]]) -> int:
        return wire.send_batch(events)

    return send


# -- the per-item stored path: ``dispatch`` with an own ``send`` ------------------------------


def _ack_one(body: bytes) -> bytes:
    """A sink's exact ACK of the one event posted."""
    event = json.loads(body)
    return answer({"ack": True, "id": event["id"], "source": event["source"]})


def test_an_item_from_the_outbox_carries_the_stored_text_and_a_wrapper_copies(
    tmp_path: Path,
) -> None:
    """``dispatch`` with the own HTTP sender's ``send`` posts each event's stored text as it
    is, with the same trace headers; a wrapper gets a copy, which the sender validates and
    encodes."""
    ids = [e["id"] for e in stored_events()]
    with RawServer(_ack_one) as server:
        wire = ackledger.sender(server.url)
        try:
            for name, send in (("stored", wire.send), ("copies", lambda e: wire.send(e))):  # noqa: PLW0108
                path = tmp_path / f"{name}.db"
                with stored_outbox(path) as outbox:
                    loose = loosen(path)
                    assert ackledger.dispatch(outbox, send) == ids
                    assert outbox.pending() == []
        finally:
            wire.close()
    stored, copied = server.requests[: len(ids)], server.requests[len(ids) :]
    loose_at = ids.index(LOOSE_ID)
    assert stored[loose_at] == loose
    assert copied[loose_at] == canonical_json(json.loads(loose)).encode()
    for n, (sent, copy) in enumerate(zip(stored, copied, strict=True)):
        assert json.loads(sent) == json.loads(copy)
        if n != loose_at:
            assert sent == copy
    heads = server.heads
    for n in range(len(ids)):
        assert header(heads[n], "traceparent") == header(heads[n + len(ids)], "traceparent")
    assert (
        header(heads[ids.index("s-03")], "traceparent") == f"00-{'1' * 32}-{'2' * 16}-01".encode()
    )


def test_a_senders_checked_options_cannot_be_changed_behind_its_route() -> None:
    """The URL, time-out, allowed hosts and token are checked once, at construction, and
    every send goes the way they were checked: they are read-only."""
    wire = HttpSender("http://127.0.0.1:9/events", timeout=2, token="t0k")
    assert (wire.url, wire.timeout, wire.allowed_hosts) == ("http://127.0.0.1:9/events", 2.0, ())
    assert wire.token is not None and wire.token.value == "t0k"
    for name, value in (("url", "http://example.org/events"), ("timeout", 1e9),
                        ("allowed_hosts", ("example.org",)), ("token", None)):  # fmt: skip
        with pytest.raises(AttributeError):
            setattr(wire, name, value)


def test_only_an_own_unwrapped_send_takes_a_stored_event() -> None:
    wire = HttpSender("http://127.0.0.1:9/events")
    assert own_stored_event(wire.send) == wire.send_stored_event
    assert stored_event_sender(wire) is wire
    assert own_stored_event(lambda event: wire.send(event)) is None  # noqa: PLW0108
    assert own_stored_event(wire.send_batch) is None
    assert own_stored(wire.send) is None

    class Edited(HttpSender):
        def send(self, event: dict[str, Any]) -> bool:
            event["data"] = {"qty": 99}
            return super().send(event)

    class Plain(HttpSender):
        pass

    edited = Edited(wire.url)
    # A subclass or a patch that changes send may do anything to the event: a copy.
    assert own_stored_event(edited.send) is None
    assert stored_event_sender(edited) is None
    patched = HttpSender(wire.url)
    patched.send = edited.send  # type: ignore[method-assign]
    assert stored_event_sender(patched) is None
    assert own_stored_event(patched.send) is None
    plain = Plain(wire.url)
    assert own_stored_event(plain.send) == plain.send_stored_event


def test_a_sender_class_patched_after_its_first_use_gets_copies_from_then_on() -> None:
    class Later(HttpSender):
        pass

    wire = Later("http://127.0.0.1:9/events")
    assert own_stored(wire.send_batch) == wire.send_stored
    assert own_stored_event(wire.send) == wire.send_stored_event

    def send_batch(self: HttpSender, events: list[dict[str, Any]]) -> int:
        return HttpSender.send_batch(self, events)

    # The class's own send_batch now wraps the original one: it may change the events, so
    # the stored text no longer stands in for it (send is still the class's own pair).
    Later.send_batch = send_batch  # type: ignore[method-assign]
    assert own_stored(wire.send_batch) is None
    assert own_stored_event(wire.send) == wire.send_stored_event
    # A stored half that is not a method at all gets copies too.
    Later.send_stored_event = None  # type: ignore[assignment,method-assign]
    Later.send = HttpSender.send  # type: ignore[method-assign]
    assert stored_event_sender(wire) is None and own_stored_event(wire.send) is None
    assert own_stored(lambda events: 0) is None and own_stored(len) is None


def test_an_item_wrapper_gets_a_copy_and_its_edit_is_validated_before_any_send(
    tmp_path: Path,
) -> None:
    def edits(event: dict[str, Any]) -> bool:
        event["data"]["qty"] = 99
        return wire.send(event)

    def breaks(event: dict[str, Any]) -> bool:
        del event["type"]
        return wire.send(event)

    with RawServer(_ack_one) as server:
        wire = ackledger.sender(server.url)
        try:
            with stored_outbox(tmp_path / "o.db") as outbox:
                selected = outbox.pending()
                assert len(ackledger.dispatch(outbox, edits)) == len(stored_events())
                assert {json.loads(body)["data"]["qty"] for body in server.requests} == {99}
                # The selection's own events were not changed by the edits.
                assert 99 not in {item["data"].get("qty") for item in selected}
                sent = len(server.requests)
                outbox.publish({**stored_events()[0], "id": "x-1"})
                with pytest.raises(ackledger.InvalidEvent):
                    ackledger.dispatch(outbox, breaks)
                assert len(server.requests) == sent  # refused before any send
                assert [item["id"] for item in outbox.pending()] == ["x-1"]
        finally:
            wire.close()


@pytest.mark.parametrize(
    "wrong", [{"id": "s-01"}, {"source": SOURCE + "/other"}, {"ack": "true"}],
    ids=["other-id", "other-source", "ack-not-true"],
)  # fmt: skip
def test_a_stored_item_counts_only_the_exact_ack_of_its_id_and_source(
    tmp_path: Path, wrong: dict[str, object]
) -> None:
    """The stored path judges the answer as ``send`` does: an ACK naming another event (or
    not an ACK) stops the batch at that event, which stays pending with the failure noted."""

    def answers(body: bytes) -> bytes:
        event = json.loads(body)
        ack = {"ack": True, "id": event["id"], "source": event["source"]}
        return answer({**ack, **wrong} if event["id"] == "s-00" else ack)

    with RawServer(answers) as server:
        wire = ackledger.sender(server.url)
        try:
            with stored_outbox(tmp_path / "o.db") as outbox:
                assert own_stored_event(wire.send) is not None
                with pytest.raises(NotAcknowledged):
                    ackledger.dispatch(outbox, wire.send)
                assert len(server.requests) == 1  # the first failure stops the batch
                pending = outbox.pending()
                assert [item["id"] for item in pending] == [e["id"] for e in stored_events()]
                stats = outbox.stats()
                assert stats["attempts"] == 1
                assert stats["last_error"]["id"] == "s-00"
                assert stats["last_error"]["error"].startswith("NotAcknowledged: ")
        finally:
            wire.close()
