"""Nothing disappears: what a consumer refuses for good is kept in its inbox database before
the broker is told to drop it, can be listed and replayed, and a failing message does not hold
up the others. Real RabbitMQ and NATS JetStream, real consumer processes (one killed with
SIGKILL between the record and the rejection).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ackledger import Inbox, new_event
from ackledger.ops.processes import run_cli

from . import pg
from .conftest import raw_rows
from .test_consume import (  # noqa: F401 - the fixtures are found by their names here
    WAIT_S,
    ConsumerProcess,
    Jet,
    Rabbit,
    body,
    eventually,
    inbox_ids,
    jet,
    rabbit,
    settled,
    start_consumer,
    stock,
)

pytestmark = pytest.mark.slow

FIXED = """
def late(tx, event):
    tx.execute("INSERT INTO applied (id) VALUES (?)", (event["id"],))


HANDLERS = {"com.example.late": late}
"""


def refused_rows(db: Path | str) -> list[tuple[object, ...]]:
    sql = "SELECT id, source, reason, refusals FROM ackledger_refused ORDER BY refused_no"
    if isinstance(db, str):  # a PostgreSQL URL
        return pg.rows(db, sql)
    try:
        return raw_rows(db, sql)
    except sqlite3.OperationalError:  # the consumer has not made its inbox yet
        return []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def inbox_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The consumer's inbox: a SQLite file, or a PostgreSQL database of this test alone."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "inbox.db"


def listed(db: Path) -> list[dict[str, object]]:
    done = run_cli("refused", "list", "--db", str(db), "--json")
    assert done.returncode == 0, done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found


def _fixed_handlers(tmp_path: Path, db: Path) -> dict[str, str]:
    """The cause fixed: a module ``fixed_events`` with a handler for ``com.example.late`` (it
    writes table ``applied``, made here in ``db``); returns the environment that finds it."""
    (tmp_path / "fixed_events.py").write_text(FIXED, encoding="utf-8")
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE applied (id TEXT)")
    conn.commit()
    conn.close()
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_amqp_records_each_refusal_then_dead_letters_it(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    good = stock("tea", 5, "e-ok")
    refused = new_event("com.example.refused", {"n": 1}, source="/shop", id="r-1")
    late = new_event("com.example.late", {"n": 1}, source="/shop", id="l-1")
    conflicting = stock("tea", 50, "e-ok")
    for payload in (body(good), body(refused), body(late), b"not json", body(conflicting)):
        rabbit.publish(payload)
    consumer = start_consumer(
        "--from", rabbit.url, "--db", str(db), "--handlers", "shop_events:HANDLERS"
    )  # fmt: skip
    eventually(lambda: rabbit.ready(rabbit.dead) == 4, "the dead letters")
    assert consumer.stop() == 0
    assert sorted(rabbit.dead_letters()) == sorted(
        [body(refused), body(late), b"not json", body(conflicting)]
    )
    rows = listed(db)
    assert [(row["id"], row["source"], row["refusals"]) for row in rows] == [
        ("r-1", "/shop", 1), ("l-1", "/shop", 1), (None, None, 1), ("e-ok", "/wh", 1),
    ]  # fmt: skip
    reasons = [str(row["reason"]) for row in rows]
    assert reasons[0] == "Rejected: this event can never be applied"
    assert reasons[1].startswith("NoHandler: ")
    assert reasons[2].startswith("body: not valid JSON")
    assert reasons[3].startswith("Conflict: ")
    assert rows[2]["message"] == "not json"
    assert rows[1]["message"] == body(late).decode()
    assert all(not row["truncated"] and row["refused_at"] for row in rows)
    text = run_cli("refused", "list", "--db", str(db))
    assert text.returncode == 0 and "(unreadable)" in text.stdout and "r-1" in text.stdout


def _killed_between_record_and_reject(
    db: Path | str,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
    url: str,
) -> None:
    crashed = start_consumer("--from", url, "--db", str(db), "--kill-after-refusal",
                             "--handlers", "shop_events:HANDLERS")  # fmt: skip
    assert crashed.process.wait(WAIT_S) == -signal.SIGKILL
    assert "refused and recorded, killed before the rejection" in crashed.stdout
    assert refused_rows(db) == [("r-1", "/shop", "Rejected: this event can never be applied", 1)]


def test_amqp_consumer_killed_between_record_and_reject_records_it_once(
    inbox_db: Path | str,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = inbox_db
    refused = new_event("com.example.refused", {"n": 1}, source="/shop", id="r-1")
    rabbit.publish(body(refused))
    _killed_between_record_and_reject(db, start_consumer, rabbit.url)
    eventually(lambda: rabbit.ready(rabbit.queue) == 1, "the unrejected message back")
    assert rabbit.ready(rabbit.dead) == 0
    consumer = start_consumer(
        "--from", rabbit.url, "--db", str(db), "--handlers", "shop_events:HANDLERS"
    )
    eventually(lambda: rabbit.ready(rabbit.dead) == 1, "the redelivery dead-lettered")
    assert consumer.stop() == 0
    # Redelivered, refused again: the same row, counted twice; nothing lost.
    assert refused_rows(db) == [("r-1", "/shop", "Rejected: this event can never be applied", 2)]
    assert rabbit.dead_letters() == [body(refused)]
    assert rabbit.ready(rabbit.queue) == 0


def test_nats_consumer_killed_between_record_and_term_records_it_once(
    tmp_path: Path,
    jet: Jet,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    jet.precreate("inbox", ack_wait=1.0)
    refused = new_event("com.example.refused", {"n": 1}, source="/shop", id="r-1")
    jet.publish(body(refused), body(stock("tea", 2, "e-1")))
    _killed_between_record_and_reject(db, start_consumer, jet.url("inbox"))
    consumer = start_consumer(
        "--from", jet.url("inbox"), "--db", str(db), "--handlers", "shop_events:HANDLERS"
    )
    eventually(lambda: settled(jet.info("inbox")), "both settled")
    assert consumer.stop() == 0
    assert refused_rows(db) == [("r-1", "/shop", "Rejected: this event can never be applied", 2)]
    assert inbox_ids(db) == ["e-1"]


def test_replay_applies_once_the_cause_is_fixed_and_refuses_again_what_still_fails(
    tmp_path: Path,
    jet: Jet,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    late = new_event("com.example.late", {"n": 1}, source="/shop", id="l-1")
    jet.publish(body(late), b"{not json")
    consumer = start_consumer("--from", jet.url("inbox"), "--db", str(db))
    eventually(lambda: len(refused_rows(db)) == 2, "both refused")
    eventually(lambda: settled(jet.info("inbox")), "both terminated")
    assert consumer.stop() == 0
    late_no, bad_no = (int(str(row["refused_no"])) for row in listed(db))

    env = _fixed_handlers(tmp_path, db)
    again = run_cli("refused", "replay", str(bad_no), "--db", str(db), env=env)
    assert again.returncode == 1, again.stderr
    assert f"refused message {bad_no}: refused again: body: not valid JSON" in again.stdout
    fixed = run_cli("refused", "replay", "--all", "--db", str(db),
                    "--handlers", "fixed_events:HANDLERS", env=env)  # fmt: skip
    assert fixed.returncode == 1, fixed.stderr  # the unreadable one is refused again
    assert f"refused message {late_no}: applied, removed from the list" in fixed.stdout
    assert raw_rows(db, "SELECT id FROM applied") == [("l-1",)]
    assert inbox_ids(db) == ["l-1"]
    assert [(row["id"], row["refusals"]) for row in listed(db)] == [(None, 3)]
    missing = run_cli("refused", "replay", str(late_no), "--db", str(db))
    assert missing.returncode == 2 and f"no refused message {late_no}" in missing.stderr


BROKEN = 8
#: Their handler always raises: a transient failure, retried after its own backoff.
FAILING = [
    body(new_event("com.example.broken", {"n": n}, source="/shop", id=f"x-{n}"))
    for n in range(BROKEN)
]


def _the_unrelated_event_applied_promptly(
    db: Path,
    url: str,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> ConsumerProcess:
    """A consumer with long backoffs, past BROKEN failing messages: the event behind them is
    applied at once (blocking the consumer for each failure's backoff would take seconds)."""
    consumer = start_consumer(
        "--from", url, "--db", str(db), "--handlers", "shop_events:HANDLERS",
        "--base-backoff", "1", "--max-backoff", "4",
    )  # fmt: skip
    eventually(lambda: "consuming" in consumer.stdout, "the consumer up")
    started = time.monotonic()
    eventually(lambda: inbox_ids(db) == ["e-1"], "the unrelated event applied")
    assert time.monotonic() - started < 1.5
    return consumer


def test_amqp_a_failing_message_does_not_hold_up_the_others(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    for payload in [*FAILING, body(stock("tea", 3, "e-1"))]:
        rabbit.publish(payload)
    consumer = _the_unrelated_event_applied_promptly(db, rabbit.url, start_consumer)
    eventually(lambda: consumer.stderr.count("failed:") >= 2 * BROKEN, "the failures retried")
    assert consumer.stop() == 0
    assert refused_rows(db) == []  # transient: never refused
    assert rabbit.dead_letters() == []
    eventually(lambda: rabbit.ready(rabbit.queue) == BROKEN, "the failing ones back in the queue")


def test_nats_a_failing_message_does_not_hold_up_the_others(
    tmp_path: Path,
    jet: Jet,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    jet.publish(*FAILING, body(stock("tea", 3, "e-1")))
    consumer = _the_unrelated_event_applied_promptly(db, jet.url("inbox"), start_consumer)
    assert consumer.stop() == 0
    assert refused_rows(db) == []
    with Inbox(db) as inbox:
        assert inbox.counters()["applied"] == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["replay", "--db", "DB"], "one of the arguments ID --all is required"),
        (["replay", "3", "--all", "--db", "DB"], "not allowed with argument ID"),
        (["replay", "x", "--db", "DB"], "must be a refused message's number, got 'x'"),
        (["replay", "0", "--db", "DB"], "must be a refused message's number, got '0'"),
        (["list", "--db", "missing.db"], "no database at"),
        (["replay", "7", "--db", "DB"], "no refused message 7"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, args: list[str], named: str
) -> None:
    db = tmp_path / "inbox.db"
    Inbox(db).close()
    before = db.read_bytes()
    done = run_cli("refused", *[str(db) if arg == "DB" else arg for arg in args])
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert db.read_bytes() == before


def test_trace_shows_a_refused_event_at_the_sink_with_its_reason(tmp_path: Path) -> None:
    from ackledger import Outbox

    source, db = tmp_path / "source.db", tmp_path / "inbox.db"
    late = new_event("com.example.late", {"n": 1}, source="/shop", id="l-1")
    with Outbox(source) as outbox:
        outbox.publish(late)
        outbox.mark_sent("l-1")
    with Inbox(db) as inbox, inbox.backend.write() as tx:
        tx.refused_record("l-1", "/shop", "NoHandler: no handler for com.example.late",
                          message=body(late), content_type=None, now=time.time())  # fmt: skip
    done = run_cli("trace", "l-1", "--source", str(source), "--sink", str(db), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [sink] = [stage for stage in report["stages"] if stage["stage"] == "sink"]
    assert (sink["seen"], sink["state"]) == ("yes", "refused at the sink")
    assert "NoHandler: no handler for com.example.late" in sink["detail"]
    assert report["verdict"].startswith("refused at the sink: NoHandler")
    assert f"ackledger refused replay 1 --db {db}" in report["verdict"]


def test_a_message_kept_cut_is_never_replayed_as_its_first_bytes(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    huge = body(stock("tea", 1, "h-1"))[:-1] + b', "pad": "' + b"x" * 70_000 + b'"}'
    with Inbox(db) as inbox, inbox.backend.write() as tx:
        tx.refused_record("h-1", "/wh", "InvalidEvent: too large", message=huge,
                          content_type=None, now=time.time())  # fmt: skip
    [row] = listed(db)
    assert row["truncated"] is True and row["message_bytes"] == len(huge)
    assert len(str(row["message"])) == 64 * 1024
    done = run_cli("refused", "replay", "1", "--db", str(db))
    assert done.returncode == 1
    assert f"only 65536 of its {len(huge)} bytes were kept" in done.stdout
    assert inbox_ids(db) == [] and [r["refusals"] for r in listed(db)] == [1]


def test_a_binary_mode_refusal_is_kept_whole_and_replays(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    import pika

    db = tmp_path / "inbox.db"
    headers = {
        "cloudEvents:specversion": "1.0",
        "cloudEvents:type": "com.example.late",
        "cloudEvents:source": "/shop",
        "cloudEvents:id": "b-1",
    }
    properties = pika.BasicProperties(
        content_type="application/json", headers=headers, delivery_mode=2
    )
    rabbit.channel.basic_publish("", rabbit.queue, b'{"n":1}', properties)
    consumer = start_consumer("--from", rabbit.url, "--db", str(db))
    eventually(lambda: len(refused_rows(db)) == 1, "the binary-mode message refused")
    assert consumer.stop() == 0
    (row,) = listed(db)
    # Its body alone is only the data: the event is kept whole, in structured mode.
    kept = json.loads(str(row["message"]))
    assert (kept["id"], kept["type"], kept["data"]) == ("b-1", "com.example.late", {"n": 1})
    env = _fixed_handlers(tmp_path, db)
    replayed = run_cli("refused", "replay", str(row["refused_no"]), "--db", str(db),
                       "--handlers", "fixed_events:HANDLERS", env=env)  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert raw_rows(db, "SELECT id FROM applied") == [("b-1",)]
    assert listed(db) == []
