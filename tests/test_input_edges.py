"""Bad input at the edges a review found open: each gets a clear error naming what is wrong,
and nothing is written (CLI: one line, exit 2; HTTP: problem JSON; API: ValueError/TypeError).
The HTTP answers are asked of the apps in-process (tests/inprocess.py)."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ackledger import InvalidEvent, Ledger, NotAcknowledged, Outbox, UnsafeTarget, send_http
from ackledger._core.strict_json import _STRICT_JSON, parse_strict_json
from ackledger.ops.processes import Service, run_cli
from ackledger.source.outbox import MAX_REASON, reason_from
from tests.conftest import raw_rows
from tests.events import lab
from tests.inprocess import InProcess
from tests.test_cli import assert_one_line_error

pytestmark = pytest.mark.slow

EVENT = {"id": "e-1", "sku": "pen", "qty": 1}  # the flat order `accept` takes
#: The event of that order, as it is sent and received.
CLOUD = lab("e-1", "pen", 1)
#: The structured-mode types of the sink's two routes (CONTRACT section 6).
STRUCTURED = "application/cloudevents+json"
BATCH_TYPE = "application/cloudevents-batch+json"
DEEP = "[" * 100_000


def _outbox_with_one_sent(path: Path) -> None:
    with Outbox(path) as outbox:
        outbox.accept(EVENT)
        outbox.mark_sent("e-1")


# --- the command line -------------------------------------------------------------------------


def test_json_nested_past_the_parser_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    assert_one_line_error(run_cli("accept", "--source", str(db), stdin=DEEP), "stdin", "deeply")
    assert not db.exists()
    deliver = run_cli(
        "deliver", "--ledger", "http://127.0.0.1:9/deliveries", "--case-id", "c",
        "--work-id", "w", "--payload", DEEP[:50_000],
    )  # fmt: skip
    assert_one_line_error(deliver, "--payload", "deeply")


@pytest.mark.parametrize("timeout", ["1e300", "86401", "inf", "nan", "0"])
def test_a_timeout_beyond_a_day_is_refused_before_anything_is_sent(
    source_db: Path, timeout: str
) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(EVENT)
    result = run_cli(
        "dispatch", "--source", str(source_db), "--to", "http://127.0.0.1:9/events",
        "--timeout", timeout,
    )  # fmt: skip
    assert_one_line_error(result, "--timeout")
    assert raw_rows(source_db, "SELECT attempts FROM ackledger_outbox") == [(0,)]


@pytest.mark.parametrize("timeout", [math.inf, math.nan, 1e300, 0, -1, True])
def test_send_http_names_a_bad_timeout_before_connecting(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        send_http(CLOUD, "http://127.0.0.1:9/events", timeout=timeout)  # type: ignore[arg-type]


def test_memory_is_not_a_database_target(tmp_path: Path) -> None:
    for command in (
        ["accept", "--source", ":memory:"],
        ["migrate", "--target", ":memory:"],
        ["serve", "sink", "--db", ":memory:", "--port", "0"],
        ["serve", "ledger", "--db", ":memory:", "--port", "0"],
    ):
        assert_one_line_error(run_cli(*command, stdin=json.dumps(EVENT)), ":memory:")
    for target in (":memory:", "file:x.db?mode=memory"):
        with pytest.raises(ValueError, match="must be a file path"):
            Outbox(target)


def test_a_duration_past_100_years_is_refused_and_nothing_is_purged(source_db: Path) -> None:
    _outbox_with_one_sent(source_db)
    for text in ("99999999999999999999999999w", "5300w"):
        result = run_cli("purge", "--source", str(source_db), "--sent-older-than", text)
        assert_one_line_error(result, "too long")
    assert raw_rows(source_db, "SELECT id, sent FROM ackledger_outbox") == [("e-1", 1)]
    with Outbox(source_db) as outbox, pytest.raises(ValueError, match="older_than_seconds"):
        outbox.purge(10**400)


def test_only_ascii_digits_are_numbers(source_db: Path) -> None:
    _outbox_with_one_sent(source_db)
    assert_one_line_error(run_cli("pending", "--source", str(source_db), "--limit", "\u0663"))
    result = run_cli("purge", "--source", str(source_db), "--sent-older-than", "\u0667d")
    assert_one_line_error(result, "not a number")
    assert raw_rows(source_db, "SELECT id FROM ackledger_outbox") == [("e-1",)]


def test_port_zero_in_a_target_is_refused_before_anything_is_sent(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(EVENT)
    result = run_cli("dispatch", "--source", str(source_db), "--to", "http://127.0.0.1:0/events")
    assert_one_line_error(result, "port 0")
    assert raw_rows(source_db, "SELECT attempts FROM ackledger_outbox") == [(0,)]
    with pytest.raises(UnsafeTarget, match="port 0"):
        send_http(CLOUD, "http://127.0.0.1:0/events")


def test_status_refuses_a_service_url_with_a_query(source_db: Path) -> None:
    Outbox(source_db).close()
    for url in ("http://127.0.0.1:1?x=1", "http://127.0.0.1:1#f"):
        assert_one_line_error(run_cli("status", "--source", str(source_db), "--sink", url))


def test_serve_refuses_an_empty_host(tmp_path: Path) -> None:
    db = tmp_path / "sink.db"
    result = run_cli("serve", "sink", "--db", str(db), "--host", "", "--port", "0")
    assert_one_line_error(result, "--host", "must not be empty")
    assert not db.exists()


def test_an_empty_pod_uid_is_refused_not_replaced() -> None:
    result = run_cli(
        "deliver", "--ledger", "http://127.0.0.1:9/deliveries", "--case-id", "c",
        "--work-id", "w", "--pod-uid", "",
    )  # fmt: skip
    assert_one_line_error(result, "--pod-uid")


def test_deliver_with_a_payload_the_ledger_finds_too_large_is_bad_input(
    ledger_service: Service, ledger_db: Path
) -> None:
    payload = json.dumps({"a": "x" * 70_000})
    result = run_cli(
        "deliver", "--ledger", ledger_service.base_url + "/deliveries", "--case-id", "c",
        "--work-id", "w", "--payload", payload,
    )  # fmt: skip
    assert_one_line_error(result, "--payload", "too large")
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(0,)]


def test_quarantine_reasons_are_one_printable_line(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(EVENT)
    for reason in ("a\nforged line", "bell\x07", "esc\x1b[2J"):
        result = run_cli("quarantine", "e-1", "--source", str(source_db), "--reason", reason)
        assert_one_line_error(result, "reason")
    assert raw_rows(source_db, "SELECT quarantined FROM ackledger_outbox") == [(0,)]
    # A reason the relay makes from a sink's answer is made printable and short enough.
    made = reason_from("sink said:\n" + "x" * 5000)
    assert made.isprintable() and len(made) == MAX_REASON
    with Outbox(source_db) as outbox:
        outbox.quarantine("e-1", made)
        assert outbox.quarantined()[0]["reason"] == made


# --- the Python API ---------------------------------------------------------------------------


def test_api_arguments_of_the_wrong_kind(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="allowed_hosts"):
        send_http(CLOUD, "http://127.0.0.1:9/events", allowed_hosts=[None])  # type: ignore[list-item]
    with Ledger(tmp_path / "l.db") as ledger:
        with pytest.raises(InvalidEvent, match="payload") as caught:
            ledger.request("c", "w", "pod", payload={"a": 10**5000})
        assert caught.value.field == "payload"
        with pytest.raises(ValueError, match="older_than_seconds"):
            ledger.purge(10**400)
        assert ledger.attempts() == []


# --- HTTP -------------------------------------------------------------------------------------


def _problem(answer: tuple[int, dict[str, str], bytes], status: int) -> dict[str, object]:
    code, headers, body = answer
    assert code == status, body
    assert headers["content-type"].startswith("application/problem+json"), headers
    found = json.loads(body)
    assert found["status"] == status
    return found  # type: ignore[no-any-return]


def test_unknown_routes_and_methods_are_problem_json(
    sink_app: InProcess, ledger_app: InProcess
) -> None:
    for service, path, known in (
        (sink_app, "/events", "POST"),
        (ledger_app, "/deliveries", "GET, POST"),
    ):
        missing = _problem(service.request("GET", "/nope"), 404)
        wrong = service.request("PUT", path, b"{}")
        refused = _problem(wrong, 405)
        assert "not allowed" in str(refused["detail"])
        # Every answer of the ledger, errors included, names the ledger that gave it.
        assert ("ledger" in missing) == ("ledger" in refused) == (service is ledger_app)
        assert set(wrong[1]["allow"].replace(" ", "").split(",")) >= set(known.split(", "))
        # A trailing slash is another path: refused, not redirected to the real one.
        _problem(service.request("POST", path + "/", json.dumps(CLOUD).encode()), 404)


def test_json_bodies_must_be_utf8(
    sink_app: InProcess, sink_db: Path, ledger_app: InProcess, ledger_db: Path
) -> None:
    ask = {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent"}
    for service, path, body, declared in (
        (sink_app, "/events", CLOUD, STRUCTURED),
        (sink_app, "/events/batch", [CLOUD], BATCH_TYPE),
        (ledger_app, "/deliveries", ask, "application/json"),
    ):
        text = json.dumps(body)
        for raw in (text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode()):
            answer = service.request("POST", path, raw, {"Content-Type": declared})
            detail = str(_problem(answer, 400)["detail"])
            assert "UTF-8" in detail or "not valid JSON" in detail, detail
    assert raw_rows(sink_db, "SELECT COUNT(*) FROM ackledger_inbox") == [(0,)]
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(0,)]


def test_a_key_given_twice_in_one_object_is_refused(
    sink_app: InProcess, sink_db: Path, ledger_app: InProcess, ledger_db: Path, tmp_path: Path
) -> None:
    """{"id": "a", ..., "id": "b"} is one event to json.loads (the last id) and another to a
    parser that keeps the first: it is refused, not guessed."""
    twice_order = b'{"id": "b1", "sku": "s", "qty": 1, "id": "b2"}'
    twice_sink = json.dumps(lab("b1", "s", 1))[:-1].encode() + b', "id": "b2"}'
    twice_ledger = (
        b'{"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control", "mode": "idempotent"}'
    )
    for service, path, raw, declared in (
        (sink_app, "/events", twice_sink, STRUCTURED),
        (sink_app, "/events/batch", b"[" + twice_sink + b"]", BATCH_TYPE),
        (ledger_app, "/deliveries", twice_ledger, "application/json"),
    ):
        answer = service.request("POST", path, raw, {"Content-Type": declared})
        assert "appears twice" in str(_problem(answer, 400)["detail"])
    assert raw_rows(sink_db, "SELECT COUNT(*) FROM ackledger_inbox") == [(0,)]
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(0,)]
    db = tmp_path / "new.db"
    for command, raw in (("accept", twice_order), ("publish", twice_sink)):
        result = run_cli(command, "--source", str(db), stdin=raw.decode())
        assert_one_line_error(result, "stdin", "'id' appears twice")
        assert not db.exists()


def test_a_query_parameter_given_twice_is_refused(ledger_app: InProcess) -> None:
    answer = ledger_app.request("GET", "/deliveries?case_id=a&case_id=b")
    problem = _problem(answer, 400)
    assert "case_id" in str(problem["detail"]) and "ledger" in problem


def test_a_body_not_declared_as_json_is_refused(
    sink_app: InProcess, sink_db: Path, ledger_app: InProcess, ledger_db: Path
) -> None:
    """A page in a browser on this machine may post text/plain or a form to loopback without
    asking first; the services apply only bodies declared as JSON (the sink: as structured
    CloudEvents, each route its own type; binary mode needs ce- headers, which such a page
    cannot send without asking). The sink answers another media type 415, a malformed one 400."""
    ask = {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent"}
    plain = ["text/plain", "application/x-www-form-urlencoded", ""]
    for service, path, body, wrong, right in (
        (sink_app, "/events", CLOUD, [*plain, BATCH_TYPE], STRUCTURED),
        (sink_app, "/events/batch", [CLOUD], [*plain, "application/json", STRUCTURED], BATCH_TYPE),
        (ledger_app, "/deliveries", ask, plain, "application/json"),
    ):
        raw = json.dumps(body).encode()
        for declared in wrong:
            answer = service.request("POST", path, raw, {"Content-Type": declared})
            status = 415 if service is sink_app and declared else 400
            assert "content-type" in str(_problem(answer, status)["detail"]).lower(), declared
        fine = service.request("POST", path, raw, {"Content-Type": right + "; charset=utf-8"})
        assert fine[0] in (200, 201), fine
    # Plain JSON at /events is binary mode, which needs the ce-* headers: without them the
    # structured body is not an event.
    other = json.dumps(lab("e-2", "pen", 1)).encode()
    _problem(sink_app.request("POST", "/events", other, {"Content-Type": "application/json"}), 415)
    assert raw_rows(sink_db, "SELECT COUNT(*) FROM ackledger_inbox") == [
        (1,)
    ]  # from the last, typed post
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM ackledger_attempts") == [(1,)]


# --- more edges: partition relays, time-outs, reasons, payload numbers, strict JSON ---------------


def test_a_partition_relay_judges_each_failure_by_itself(
    sink_service: Service, sink_db: Path
) -> None:
    """After a batch the sink refused (422), a failure that is not a refused batch (the
    database, the network) is transient: it must not borrow that refusal."""
    from ackledger import Inbox
    from ackledger.relay.policy import PERMANENT, TRANSIENT, failure_of
    from ackledger.wire.sender import sender

    with Inbox(sink_db) as inbox:
        inbox.receive(lab("bad", "tea", 99))
    sends = sender(sink_service.base_url + "/events")
    assert sends.send_batch([lab("bad", "tea", 1)]) == 0
    refused = NotAcknowledged("only 0 of 1 events acknowledged")
    assert failure_of(refused, sends.refusal).kind == PERMANENT
    assert "422" in failure_of(refused, sends.refusal).message
    blip = sqlite3.OperationalError("database is locked")
    for other in (blip, ConnectionRefusedError(111, "refused"), TimeoutError()):
        assert failure_of(other, sends.refusal).kind == TRANSIENT
        assert "422" not in failure_of(other, sends.refusal).message


def test_time_outs_are_checked_when_a_relay_is_configured() -> None:
    from ackledger.relay.settings import RelaySettings

    assert RelaySettings(url="http://127.0.0.1:9/events", timeout=7200).timeout == 7200
    with pytest.raises(ValueError, match="timeout"):
        RelaySettings(url="http://127.0.0.1:9/events", timeout=1e6)


def test_the_partition_worker_fits_its_first_wait_under_a_small_cap(tmp_path: Path) -> None:
    from tests.sends import partition_worker

    with Outbox(tmp_path / "o.db") as outbox:
        worker = partition_worker(outbox, owner="w", send=lambda event: True, max_backoff=0.03)
        assert worker.settings.base_backoff == 0.03
        with pytest.raises(ValueError, match="cap"):
            partition_worker(outbox, owner="w", send=lambda event: True, max_backoff=0.3,
                             base_backoff=1.0)  # fmt: skip


def test_reasons_in_any_script_are_text(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(EVENT)
    reason = "在庫\u3000不足 (stock\u00a0short)"  # a full-width space and a no-break space
    result = run_cli("quarantine", "e-1", "--source", str(source_db), "--reason", reason)
    assert result.returncode == 0, result.stderr
    with Outbox(source_db) as outbox:
        assert outbox.quarantined()[0]["reason"] == reason
    assert run_cli("requeue", "e-1", "--source", str(source_db)).returncode == 0
    tab = run_cli("quarantine", "e-1", "--source", str(source_db), "--reason", "a\tb")
    assert_one_line_error(tab, "reason", "control characters")


def test_payload_numbers_are_compared_as_written(tmp_path: Path) -> None:
    """The documented rule (docs/ledger.md): key order does not matter, how a number is
    written does."""
    from ackledger import Conflict

    with Ledger(tmp_path / "l.db") as ledger:
        first = ledger.request("c", "w", "pod", payload={"amount": 10, "sku": "pen"})
        again = ledger.request("c", "w", "pod", payload={"sku": "pen", "amount": 10})
        assert again["duplicate"] and again["delivery_no"] == first["delivery_no"]
        with pytest.raises(Conflict):
            ledger.request("c", "w", "pod", payload={"amount": 10.0, "sku": "pen"})
        with pytest.raises(InvalidEvent, match="finite"):
            ledger.request("c", "w2", "pod", payload={"amount": float("inf")})


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1}', ' {"a":1} ', '{"a":1}\n', '{"a":1} x', '{"a":1}{}', "", "  ", "1 ", "nul",
        '{"a":1,"a":2}', '{"a":{"b":1,"b":2}}', '{"a":', "[1,]", "\ufeff{}", "truex",
    ],
)  # fmt: skip
def test_strict_json_scans_directly_only_what_decode_would_accept_alike(text: str) -> None:
    # parse_strict_json skips the decoder's Python wrapper for a text that is one value from
    # its first character to its last; every other text, and every error, is decode's own.
    def outcome(parse: Callable[[str], object]) -> tuple[str, str]:
        try:
            return "value", repr(parse(text))
        except ValueError as exc:
            return type(exc).__name__, str(exc)

    assert outcome(parse_strict_json) == outcome(_STRICT_JSON.decode)
