"""``ackledger verify``: it passes a healthy pipeline and catches broken ones.

Real processes throughout: ``verify`` itself, the sinks and relays it starts, SIGKILL, a
fault proxy on loopback, real SQLite files and a real PostgreSQL server. The broken cases are
a handler that applies outside the inbox's transaction (a killed sink then double-applies) and
a sender that acknowledges without delivering (everything is lost).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ackledger import Inbox
from ackledger.cli import main
from ackledger.ops.processes import Child, cli_command, run_cli
from ackledger.ops.verify import report
from ackledger.ops.verify import schedules as s
from ackledger.ops.verify.campaign import Outcome
from ackledger.ops.verify.judge import Counts, Sides, judge
from ackledger.store.postgres.scratch import scratch_names

from . import pg

pytestmark = pytest.mark.slow
PREFIX = "ackledger_verify_"
PG_KINDS = s.kinds_for(own_sink=True, http=True, partitioned=True)
#: A schedule of PG_KINDS that kills the sink while it works (sink-kill@0.29s, cut-mid-batch).
SINK_KILLED = 4


def verify(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli("verify", *args, timeout=timeout)


def test_a_schedule_is_drawn_from_its_seed_and_the_allowed_kinds_alone() -> None:
    assert s.draw(7, PG_KINDS) == s.draw(7, PG_KINDS)
    assert s.draw(7, PG_KINDS) != s.draw(8, PG_KINDS)
    sqlite_kinds = s.kinds_for(own_sink=True, http=True, partitioned=False)
    assert s.LEASE_STEAL not in sqlite_kinds
    assert s.kinds_for(own_sink=False, http=False, partitioned=False) == (s.RELAY_ACK_MARK,)
    kinds = {fault.kind for seed in range(50) for fault in s.draw(seed, sqlite_kinds).faults}
    assert kinds == set(sqlite_kinds)
    assert s.SINK_KILL in [fault.kind for fault in s.draw(SINK_KILLED, PG_KINDS).faults]


def test_a_healthy_pipeline_on_sqlite_passes(tmp_path: Path) -> None:
    done = verify("--source", str(tmp_path), "--schedules", "2", "--seed", "1", "--events", "12")
    assert done.returncode == 0, done.stdout + done.stderr
    head, row = done.stdout.splitlines()[1:3]
    assert head.split() == list(report.COLUMNS)
    figures = dict(zip(head.split(), map(int, row.split()), strict=True))
    assert figures["schedules"] == 2 and figures["events"] == 24 and figures["kills"] >= 1
    assert "VERDICT: PASS" in done.stdout
    assert "schedule 2/2 seed 2" in done.stderr  # plain progress lines: not a terminal
    assert list(tmp_path.iterdir()) == []  # the scratch folder is gone


def test_a_healthy_pipeline_on_postgres_passes_and_leaves_no_database() -> None:
    pg.require_postgres()
    before = set(scratch_names(pg.ADMIN_URL, PREFIX))
    done = verify("--source", pg.ADMIN_URL, "--schedules", "1", "--seed", "1", "--events", "10",
                  "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "pass" and result["events"] == 10
    assert (result["lost"], result["double_applied"], result["stuck"]) == (0, 0, 0)
    assert "lease-steal" in done.stderr  # seed 1 on PostgreSQL steals a lease
    assert set(scratch_names(pg.ADMIN_URL, PREFIX)) <= before  # none of this run's left


def test_a_handler_that_applies_outside_the_inbox_is_caught() -> None:
    pg.require_postgres()
    before = set(scratch_names(pg.ADMIN_URL, PREFIX))
    done = verify("--source", pg.ADMIN_URL, "--handlers", "tests.verify_handlers:BROKEN",
                  "--schedules", "1", "--seed", str(SINK_KILLED), "--events", "8")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    figures = dict(zip(*(line.split() for line in done.stdout.splitlines()[1:3]), strict=True))
    assert int(figures["double-applied"]) >= 1 and int(figures["kills"]) >= 1
    assert "VERDICT: FAIL" in done.stdout
    replay = f"replay: ackledger verify --source {pg.ADMIN_URL} --handlers"
    assert replay in done.stdout and f"--seed {SINK_KILLED} --schedules 1" in done.stdout
    assert set(scratch_names(pg.ADMIN_URL, PREFIX)) <= before  # none of this run's left


def test_an_async_handler_is_awaited_by_verifys_sink_and_the_judge_is_named(
    tmp_path: Path,
) -> None:
    """An async handler of the lab's type is awaited in the receipt's transaction (before,
    its coroutine was never run: every event "lost"); verify says what it judges by."""
    done = verify("--source", str(tmp_path), "--handlers", "tests.verify_handlers:ASYNC",
                  "--schedules", "1", "--seed", str(SINK_KILLED), "--events", "8")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VERDICT: PASS" in done.stdout
    assert "judges warehouse.stock.added events only, by the lab's inventory" in done.stderr
    assert "com.example.order.placed are loaded and checked, not exercised" in done.stderr
    assert "never awaited" not in done.stderr


def test_verify_runs_its_sink_with_the_users_session(pg_url: str) -> None:
    """The user's handler runs with the user's session factory, through sink kills and cut
    connections, on the user's database: nothing lost, nothing applied twice."""
    assert run_cli("migrate", "--target", pg_url, "--lab").returncode == 0
    env = {**os.environ, "SHOP_DB": pg_url}
    done = run_cli("verify", "--source", pg.ADMIN_URL, "--sink-db", pg_url,
                   "--session", "tests.verify_handlers:session",
                   "--handlers", "tests.verify_handlers:SESSION",
                   "--schedules", "1", "--seed", str(SINK_KILLED), "--events", "8",
                   env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = dict(zip(*(line.split() for line in done.stdout.splitlines()[1:3]), strict=True))
    assert int(figures["kills"]) >= 1 and "VERDICT: PASS" in done.stdout
    assert "(your handler of it)" in done.stderr
    (applied,) = pg.rows(pg_url, "SELECT count(*) FROM inventory")[0]
    assert applied == 8  # judged on the user's database, where the session wrote


def test_verify_refuses_a_session_on_another_database_than_sink_db(
    pg_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "SHOP_DB": pg_url}
    other = tmp_path / "other.db"
    Inbox(other).close()
    done = run_cli("verify", "--sink-db", str(other), "--session",
                   "tests.verify_handlers:session", env=env)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--session:" in done.stderr and "another database" in done.stderr, done.stderr
    missing = run_cli("verify", "--session", "tests.verify_handlers:session", env=env)
    assert missing.returncode == 2 and "needs --sink-db" in missing.stderr, missing.stderr


class _AcksWithoutDelivering(BaseHTTPRequestHandler):
    """A broken sink: it answers every batch with exact ACKs and applies nothing."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        events = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        acks = [{"id": e["id"], "source": e["source"], "ack": True} for e in events]
        body = json.dumps({"acks": acks}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def acking_sink() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AcksWithoutDelivering)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/events"
    finally:
        server.shutdown()
        server.server_close()


def test_a_sender_that_acks_without_delivering_is_caught(tmp_path: Path, acking_sink: str) -> None:
    inbox = tmp_path / "inbox.db"
    Inbox(inbox).close()
    done = verify("--source", str(tmp_path), "--to", acking_sink, "--sink-db", str(inbox),
                  "--schedules", "1", "--seed", "3", "--events", "6")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    figures = dict(zip(*(line.split() for line in done.stdout.splitlines()[1:3]), strict=True))
    assert figures["lost"] == "6" and figures["stuck"] == "0"
    assert "--seed 3 --schedules 1" in done.stdout


def test_a_broker_and_its_consumer_pass_through_cuts(tmp_path: Path) -> None:
    from bench.broker_routes import open_route

    inbox = tmp_path / "inbox.db"
    with open_route("amqp") as route:
        consumer = Child(["consume", "--from", route.consume_url, "--db", str(inbox)],
                         tmp_path / "consume.log")  # fmt: skip
        try:
            assert consumer.wait_for("consuming:", 60), consumer.log.read_text()
            done = verify("--to", route.relay_url, "--sink-db", str(inbox), "--schedules", "1",
                          "--seed", "1", "--events", "8", "--json")  # fmt: skip
        finally:
            assert consumer.stop() == 0
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["events"], result["lost"], result["double_applied"]) == (8, 0, 0)
    assert "cut-mid-batch" in done.stderr and "note" not in done.stderr  # the cut landed
    assert "guest:guest" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--seed", "x"], "--seed"),
        (["--seed", "-1"], "--seed"),
        (["--schedules", "0"], "--schedules"),
        (["--events", "0"], "--events"),
        (["--handlers", "no_such_module_here:H"], "no_such_module_here"),
        (["--to", "http://127.0.0.1:9/events"], "--sink-db"),
        (["--sink-db", "x.db"], "--sink-db"),
        (["--source", "{missing}"], "--source"),
        (["--to", "http://sink.invalid/events", "--sink-db", "{inbox}"], "host"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    inbox = tmp_path / "inbox.db"
    Inbox(inbox).close()
    filled = [a.format(missing=tmp_path / "missing", inbox=inbox) for a in args]
    with pytest.raises(SystemExit) as exited:
        main(["verify", *filled])
    out, err = capsys.readouterr()
    assert exited.value.code == 2, out + err
    assert err.count("\n") == 1 and says in err and err.startswith("ackledger: error: "), err
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inbox.db"]


def test_an_unreachable_postgres_server_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["verify", "--source", "postgresql://postgres@127.0.0.1:1/x", "--schedules", "1"])
    err = capsys.readouterr().err
    assert exited.value.code == 4, err
    assert err.count("\n") == 1 and "database unavailable" in err


def test_ctrl_c_drops_the_scratch_databases() -> None:
    pg.require_postgres()
    before = set(scratch_names(pg.ADMIN_URL, PREFIX))
    # SIGINT as a terminal gives it: a test runner started in the background (``cmd &`` in a
    # shell without job control) ignores SIGINT, and its children would inherit that.
    process = subprocess.Popen(
        cli_command("verify", "--source", pg.ADMIN_URL, "--schedules", "5", "--seed", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not set(scratch_names(pg.ADMIN_URL, PREFIX)) - before:
            assert time.monotonic() < deadline and process.poll() is None, "no scratch database"
            time.sleep(0.05)
        time.sleep(1)  # into the schedule: its processes are running
        process.send_signal(signal.SIGINT)
        code = process.wait(60)
        out, err = process.communicate()
        assert code == 130, out + err
    finally:
        process.kill()
        process.communicate()
    assert set(scratch_names(pg.ADMIN_URL, PREFIX)) <= before  # none of this run's left


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere() -> None:
    schedule = s.draw(1, PG_KINDS)
    ok, bad = Outcome(schedule, Counts(events=4)), Outcome(schedule, Counts(events=4, lost=1))
    terminal = _Terminal()
    bar = report.Progress(2, terminal)
    bar.schedule_started(1)
    bar.schedule_done(ok)
    bar.schedule_done(bad)
    assert terminal.getvalue().startswith("\r[....")
    assert "[" + "#" * 30 + "] 2/2 schedules, 1 failing" in terminal.getvalue()
    assert terminal.getvalue().endswith("\n") and terminal.getvalue().count("\n") == 1
    plain = io.StringIO()
    lines = report.Progress(2, plain)
    lines.schedule_started(1)
    lines.schedule_done(ok)
    lines.schedule_done(bad)
    assert plain.getvalue().splitlines() == [
        f"verify: schedule 1/2 seed 1 ({schedule.text()}): ok",
        f"verify: schedule 2/2 seed 1 ({schedule.text()}): FAIL",
    ]
    assert "replay: ackledger verify --seed 1 --schedules 1" in report.verdict([bad], ["verify"])


def test_the_judge_counts_each_kind_of_wrong() -> None:
    def row(n: int, partition: str, sent: int = 1, quarantined: int = 0) -> dict[str, object]:
        return {"id": f"e{n}", "partition": partition, "seq": n, "sent": sent,
                "quarantined": quarantined}  # fmt: skip

    outbox = [row(1, "a"), row(2, "a"), row(3, "b"), row(4, "b", sent=0), row(5, "a"),
              row(6, "b", quarantined=1)]  # fmt: skip
    stock = {"e1": 1, "e2": 1, "e3": 2, "e4": 1, "e6": 1}  # e5 never applied, e3 twice
    arrivals = {"e1": 1, "e2": 5, "e3": 2, "e4": 3, "e6": 4}
    counts = judge(Sides(outbox, stock, arrivals), 7)  # 7 accepted, one of them gone
    assert (counts.lost, counts.double_applied, counts.stuck, counts.reordered) == (2, 1, 2, 0)
    assert counts.examples == {"lost": ["e5"], "double_applied": ["e3"], "stuck": ["e4", "e6"]}
    arrivals["e2"] = 0  # e2 arrived before e1, of the same partition
    assert judge(Sides(outbox, stock, arrivals), 6).reordered == 1
    clean = judge(Sides([row(1, "a")], {"e1": 1}, {"e1": 1}), 1)
    assert clean.clean and not judge(Sides([row(1, "a")], {}, {}), 1).clean
