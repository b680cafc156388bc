"""The NATS JetStream sender against the real server on 127.0.0.1:4222.

Every test makes its own stream (a unique name, subjects ``PREFIX.>``) and deletes it after;
what the broker stored is read back from the stream, not from the sender.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from ackledger import NotAcknowledged, Outbox, UnsafeTarget, dispatch, new_event, sender
from ackledger._core.extras import MissingExtra
from ackledger.envelope import canonical_json
from ackledger.errors import AckledgerError
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import run_cli
from ackledger.relay.policy import PERMANENT, TRANSIENT, failure_of
from ackledger.source.dispatch import dispatch_batch, own_stored, own_stored_event
from ackledger.wire.nats import NatsSender
from tests.opshelp import free_port, start_relay, wait_until
from tests.rawserver import forbid_network
from tests.stored_events import LOOSE_ID, dispatchers, loosen, stored_events, stored_outbox

SERVER = "nats://127.0.0.1:4222"
SOURCE = "urn:test:nats"


async def _admin(work: Any) -> Any:
    nc = await nats.connect(SERVER)
    try:
        return await work(nc.jetstream())
    finally:
        await nc.close()


@dataclass
class Stream:
    name: str
    prefix: str

    def url(self, **query: str) -> str:
        extra = "".join(f"&{key}={value}" for key, value in query.items())
        return f"{SERVER}?subject={self.prefix}{extra}"

    def count(self) -> int:
        async def work(js: Any) -> int:
            return int((await js.stream_info(self.name)).state.messages)

        return int(asyncio.run(_admin(work)))

    def message(self, seq: int) -> Any:
        async def work(js: Any) -> Any:
            return await js.get_msg(self.name, seq)

        return asyncio.run(_admin(work))

    def ids(self) -> list[str]:
        return [json.loads(self.message(n).data)["id"] for n in range(1, self.count() + 1)]


def _make_stream(subjects: list[str] | None = None) -> Stream:
    tag = uuid.uuid4().hex[:12]
    stream = Stream(f"ackledger-test-{tag}", f"ackt{tag}")

    async def work(js: Any) -> None:
        await js.add_stream(name=stream.name, subjects=subjects or [f"{stream.prefix}.>"])

    asyncio.run(_admin(work))
    return stream


def _delete(stream: Stream) -> None:
    async def work(js: Any) -> None:
        await js.delete_stream(stream.name)

    asyncio.run(_admin(work))


@pytest.fixture
def stream() -> Iterator[Stream]:
    made = _make_stream()
    try:
        yield made
    finally:
        _delete(made)


@pytest.fixture
def other_stream() -> Iterator[Stream]:
    made = _make_stream()
    try:
        yield made
    finally:
        _delete(made)


@pytest.fixture
def wire(stream: Stream) -> Iterator[NatsSender]:
    made = sender(stream.url(), timeout=5)
    assert isinstance(made, NatsSender)
    try:
        yield made
    finally:
        made.close()


def _event(event_id: str, kind: str = "com.example.order.placed", **extra: Any) -> dict[str, Any]:
    return new_event(kind, {"n": event_id}, source=SOURCE, id=event_id, **extra)


def test_an_event_is_acked_and_stored_with_its_headers_and_body(
    stream: Stream, wire: NatsSender
) -> None:
    event = _event("e-1", subject="café", partitionkey="p1")
    assert wire.send(event) is True
    assert stream.count() == 1
    stored = stream.message(1)
    assert stored.subject == f"{stream.prefix}.com.example.order.placed"
    assert stored.data == canonical_json(event).encode()
    headers = stored.headers
    assert headers["Nats-Msg-Id"] == f"{SOURCE} e-1"
    assert headers["content-type"] == "application/cloudevents+json"
    assert headers["ce-id"] == "e-1"
    assert headers["ce-source"] == SOURCE
    assert headers["ce-type"] == "com.example.order.placed"
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-partitionkey"] == "p1"
    # Outside printable ASCII, as the CloudEvents HTTP binding encodes it; data is no header.
    assert headers["ce-subject"] == "caf%C3%A9"
    assert "ce-data" not in headers


def test_a_resend_is_acked_as_a_duplicate_and_stored_once(stream: Stream, wire: NatsSender) -> None:
    event = _event("e-dup")
    assert wire.send(event) is True
    assert wire.send(event) is True
    events = [_event(f"b-{n:02d}") for n in range(16)]
    assert wire.send_batch(events) == 16
    assert wire.send_batch(events) == 16  # all duplicates, all acknowledged
    assert stream.count() == 17
    # Written in order, acknowledged concurrently: the stream's order is the batch's.
    assert stream.ids() == ["e-dup"] + [e["id"] for e in events]


def test_a_subject_no_stream_covers_is_not_acked_and_permanent() -> None:
    wire = sender(f"{SERVER}?subject=nowhere{uuid.uuid4().hex[:8]}", timeout=5)
    try:
        with pytest.raises(NotAcknowledged) as raised:
            wire.send(_event("e-lost"))
        assert failure_of(raised.value, None, "e-lost").kind == PERMANENT
        assert wire.send_batch([_event("e-lost"), _event("e-next")]) == 0
        refusal = wire.refusal
        assert refusal is not None and refusal.event_id == "e-lost"
        # What the relay sees of a batch: dispatch_batch's NotAcknowledged and the refusal.
        failure = failure_of(NotAcknowledged("only 0 of 2"), refusal)
        assert failure.kind == PERMANENT and failure.event_id == "e-lost"
        assert failure.message.startswith("JetStream 404 in batch: no stream")
    finally:
        wire.close()


def test_a_stream_that_is_not_the_named_one_is_not_acked(
    stream: Stream, other_stream: Stream
) -> None:
    wrong = sender(stream.url(stream=other_stream.name), timeout=5)
    right = sender(stream.url(stream=stream.name), timeout=5)
    try:
        with pytest.raises(NotAcknowledged) as raised:
            wrong.send(_event("e-wrong"))
        assert failure_of(raised.value, None, "e-wrong").kind == PERMANENT
        assert wrong.send_batch([_event("e-wrong")]) == 0
        assert wrong.refusal is not None and wrong.refusal.status == 400
        # The server refused it: nothing was stored in either stream.
        assert stream.count() == 0 and other_stream.count() == 0
        assert right.send(_event("e-right")) is True
        assert stream.ids() == ["e-right"]
    finally:
        wrong.close()
        right.close()


@pytest.fixture
def ok_only() -> Iterator[Stream]:
    """A stream that takes only the ``ok.`` types: a ``bad.`` event has no stream."""
    tag = uuid.uuid4().hex[:12]
    made = Stream(f"ackledger-test-{tag}", f"ackt{tag}")

    async def work(js: Any) -> None:
        await js.add_stream(name=made.name, subjects=[f"{made.prefix}.ok.>"])

    asyncio.run(_admin(work))
    try:
        yield made
    finally:
        _delete(made)


def test_a_batch_is_acknowledged_up_to_its_first_refusal(ok_only: Stream) -> None:
    wire = sender(ok_only.url(), timeout=5)
    try:
        kinds = ["ok.x", "ok.x", "bad.x", "ok.x"]
        events = [_event(f"e{n}", kind) for n, kind in enumerate(kinds)]
        assert wire.send_batch(events) == 2
        assert wire.refusal is not None and wire.refusal.event_id == "e2"
        assert wire.refusal.status == 404
    finally:
        wire.close()


def _outbox(path: Path, *events: dict[str, Any]) -> None:
    with Outbox(path, source=SOURCE) as outbox:
        for event in events:
            outbox.publish(event)


def _pending(path: Path) -> list[str]:
    with Outbox(path, source=SOURCE) as outbox:
        return [item["id"] for item in outbox.pending()]


@pytest.mark.parametrize("batch", [False, True])
def test_dispatch_marks_only_what_jetstream_acknowledged(
    ok_only: Stream, tmp_path: Path, batch: bool
) -> None:
    source = tmp_path / "source.db"
    kinds = ["ok.a", "ok.b", "bad.c", "ok.d"]
    _outbox(source, *(_event(f"e{n}", kind) for n, kind in enumerate(kinds)))
    wire = sender(ok_only.url(), timeout=5)
    try:
        with Outbox(source) as outbox, pytest.raises(NotAcknowledged):
            if batch:
                dispatch_batch(outbox, wire.send_batch)
            else:
                dispatch(outbox, wire.send)
    finally:
        wire.close()
    assert _pending(source) == ["e2", "e3"]
    # One-by-one sending stopped at e2; a batch wrote e3 too (stays pending: a re-send of it
    # is a duplicate to JetStream).
    assert ok_only.ids() == (["e0", "e1", "e3"] if batch else ["e0", "e1"])


def test_cli_dispatch_to_nats_exits_0_and_everything_is_stored(
    stream: Stream, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    events = [_event(f"c{n}") for n in range(5)]
    _outbox(source, *events)
    done = run_cli("dispatch", "--source", str(source), "--to", stream.url(), "--limit", "3")
    assert done.returncode == 0, done.stderr
    assert "dispatched 3 event(s)" in done.stdout
    assert _pending(source) == ["c3", "c4"]
    done = run_cli("dispatch", "--source", str(source), "--to", stream.url(), "--batch")
    assert done.returncode == 0, done.stderr
    assert _pending(source) == []
    assert stream.ids() == [e["id"] for e in events]


def test_relay_to_nats_drains_the_outbox_and_stops_on_sigterm(
    stream: Stream, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    events = [_event(f"r{n:03d}") for n in range(40)]
    _outbox(source, *events)
    # Credentials in the URL (the server has no auth and ignores them) never reach the log.
    url = stream.url().replace("nats://", "nats://relay:hunter2@")
    log = tmp_path / "relay.log"
    relay = start_relay(source, url, log, "--batch")
    try:
        wait_until(lambda: not _pending(source), "the outbox to drain")
        assert relay.stop(signal.SIGTERM, timeout=30) == 0
    finally:
        relay.stop()
    assert stream.ids() == [e["id"] for e in events]
    text = log.read_text()
    assert "stopped" in text
    assert "hunter2" not in text


def test_a_target_outside_the_allow_list_is_refused_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    touched = forbid_network(monkeypatch)
    with pytest.raises(UnsafeTarget, match=r"broker\.invalid"):
        sender("nats://broker.invalid:4222?subject=x")
    # Allowed explicitly, it is built; nothing connects until the first send.
    built = sender("nats://broker.invalid:4222?subject=x", allowed_hosts=["broker.invalid"])
    assert isinstance(built, NatsSender)
    assert not [t for t in threading.enumerate() if t.name == "ackledger-nats"]
    built.close()
    assert touched == []


@pytest.mark.parametrize(
    ("url", "word"),
    [
        ("nats://127.0.0.1:4222", "subject is missing"),
        ("nats://127.0.0.1:4222?stream=S", "subject is missing"),
        ("nats://127.0.0.1:4222?subject=a.>", "not a subject prefix"),
        ("nats://127.0.0.1:4222?subject=a..b", "not a subject prefix"),
        ("nats://127.0.0.1:4222?subject=a&subject=b", "given 2 times"),
        ("nats://127.0.0.1:4222?subject=a&queue=q", "unknown query parameter 'queue'"),
        ("nats://127.0.0.1:4222?subject=a&stream=a.b", "not a stream name"),
        ("nats://127.0.0.1:4222/x?subject=a", "no path"),
        ("nats://127.0.0.1:0?subject=a", "port 0"),
        ("nats://127.0.0.1:4222?subject=a#f", "fragment"),
        ("nats://u:pw-secret@10.0.0.1:4222?subject=a", "'10.0.0.1' is not allowed"),
    ],
)
def test_bad_nats_urls_are_named_and_never_show_the_password(url: str, word: str) -> None:
    with pytest.raises(UnsafeTarget) as raised:
        sender(url)
    assert word in str(raised.value)
    assert "pw-secret" not in str(raised.value)


def test_cli_refuses_a_nats_url_without_subject_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _outbox(source, _event("x1"))
    done = run_cli("dispatch", "--source", str(source), "--to", "nats://127.0.0.1:4222")
    assert done.returncode == 2
    assert "subject is missing" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert _pending(source) == ["x1"]


def test_an_unreachable_server_raises_and_nothing_is_marked(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _outbox(source, _event("u1"), _event("u2"))
    wire = sender(f"nats://user:pw-secret@127.0.0.1:{free_port()}?subject=x", timeout=2)
    try:
        with Outbox(source) as outbox, pytest.raises(ConnectionError) as raised:
            dispatch(outbox, wire.send)
        assert "pw-secret" not in str(raised.value)
        assert failure_of(raised.value, None, "u1").kind == TRANSIENT
        with Outbox(source) as outbox, pytest.raises(ConnectionError):
            dispatch_batch(outbox, wire.send_batch)
    finally:
        wire.close()
    assert _pending(source) == ["u1", "u2"]


def test_after_a_cut_connection_the_next_send_connects_afresh(stream: Stream) -> None:
    # The proxy cuts the first connection as soon as the server speaks: that send fails.
    with FaultProxy(4222, drop_responses=1) as proxy:
        wire = sender(f"nats://127.0.0.1:{proxy.port}?subject={stream.prefix}", timeout=3)
        try:
            with pytest.raises(OSError):
                wire.send(_event("k1"))
            assert wire.send(_event("k1")) is True
            assert wire.send(_event("k2")) is True
        finally:
            wire.close()
        assert proxy.connections == 2  # one cut, one kept for both later sends
    assert stream.ids() == ["k1", "k2"]


def test_close_stops_the_loop_thread(wire: NatsSender) -> None:
    assert wire.send(_event("t1")) is True
    assert [t for t in threading.enumerate() if t.name == "ackledger-nats"]
    wire.close()
    assert not [t for t in threading.enumerate() if t.name == "ackledger-nats"]
    wire.close()  # twice is fine


_WITHOUT_NATS = """
import sys
sys.modules["nats"] = None  # as if nats-py were not installed
from ackledger.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_nats_py_the_error_names_the_extra(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _outbox(source, _event("m1"))
    args = ["dispatch", "--source", str(source), "--to", "nats://127.0.0.1:4222?subject=x"]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NATS, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "pip install 'ackledger[nats]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _pending(source) == ["m1"]


def test_the_missing_extra_is_an_import_error_and_an_ackledger_error() -> None:
    code = "import sys; sys.modules['nats'] = None\nfrom ackledger import sender\n" + (
        "try:\n    sender('nats://127.0.0.1:4222?subject=x')\n"
        "except ImportError as e:\n    print(type(e).__name__, e.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    kind, module = done.stdout.split()
    assert (kind, module.partition(".")[0]) == ("MissingExtra", "nats"), done.stderr
    assert issubclass(MissingExtra, AckledgerError)


def test_relay_quarantines_an_event_no_stream_takes_and_drains_the_rest(
    ok_only: Stream, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    kinds = ["ok.a", "bad.b", "ok.c"]
    _outbox(source, *(_event(f"q{n}", kind) for n, kind in enumerate(kinds)))
    log = tmp_path / "relay.log"
    relay = start_relay(source, ok_only.url(), log, "--on-poison", "quarantine")
    try:
        wait_until(lambda: not _pending(source), "the outbox to drain")
        assert relay.stop(signal.SIGTERM, timeout=30) == 0
    finally:
        relay.stop()
    assert ok_only.ids() == ["q0", "q2"]
    status = run_cli("status", "--source", str(source), "--json")
    assert json.loads(status.stdout)["quarantined"] == 1
    assert "no stream covers this subject" in log.read_text()


def test_relay_stops_on_a_poison_event_with_exit_3_and_one_last_line(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _outbox(source, _event("p0"))
    log = tmp_path / "relay.log"
    url = f"{SERVER}?subject=nowhere{uuid.uuid4().hex[:8]}"
    relay = start_relay(source, url, log, "--batch", "--on-poison", "stop")
    try:
        assert relay.process.wait(60) == 3
    finally:
        relay.stop()
    text = log.read_text()
    assert "stopped on poison event p0" in text and "Traceback" not in text
    assert _pending(source) == ["p0"]


def test_a_puback_too_late_is_a_transient_time_out_and_the_resend_is_stored_once(
    stream: Stream, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    _outbox(source, _event("s1"), _event("s2"))
    with FaultProxy(4222) as proxy:
        wire = sender(f"nats://127.0.0.1:{proxy.port}?subject={stream.prefix}", timeout=0.5)
        try:
            with Outbox(source) as outbox:
                assert dispatch(outbox, wire.send, 1) == ["s1"]
                # From now on every answer of the server is held longer than the time-out.
                proxy.delay_responses = 1.5
                with pytest.raises(TimeoutError) as raised:
                    dispatch(outbox, wire.send)
                assert failure_of(raised.value, None, "s2").kind == TRANSIENT
                assert [item["id"] for item in outbox.pending()] == ["s2"]
                proxy.delay_responses = 0
                # The server stored s2 before its PubAck was held: the re-send, on a new
                # connection, is a duplicate, acknowledged, and stored once.
                assert dispatch(outbox, wire.send) == ["s2"]
        finally:
            wire.close()
        assert proxy.connections == 2
    assert stream.ids() == ["s1", "s2"]


@pytest.mark.parametrize("per", ["batch", "item"])
def test_the_stored_path_sends_the_stored_bytes_with_the_same_headers(
    stream: Stream, other_stream: Stream, tmp_path: Path, per: str
) -> None:
    """Copies through a wrapper to one stream, the stored path to another (JetStream would drop
    the second as duplicates in one stream: same Nats-Msg-Id), then message by message."""
    count = len(stored_events())
    copies, stored = sender(stream.url(), timeout=5), sender(other_stream.url(), timeout=5)
    assert isinstance(stored, NatsSender)
    assert own_stored(stored.send_batch) == stored.send_stored
    assert own_stored_event(stored.send) == stored.send_stored_event
    try:
        with stored_outbox(tmp_path / "copies.db") as outbox:
            loose = loosen(tmp_path / "copies.db")
            assert len(dispatchers(copies, per)[1](outbox)) == count
        with stored_outbox(tmp_path / "stored.db") as outbox:
            loosen(tmp_path / "stored.db")
            assert len(dispatchers(stored, per)[0](outbox)) == count
    finally:
        copies.close()
        stored.close()
    assert stream.count() == other_stream.count() == count
    for n in range(1, count + 1):
        copied, sent = stream.message(n), other_stream.message(n)
        assert sent.headers == copied.headers
        assert "ce-seq" not in sent.headers
        if json.loads(copied.data)["id"] == LOOSE_ID:
            assert sent.data == loose
            assert copied.data == canonical_json(json.loads(loose)).encode()
        else:
            assert sent.data == copied.data
