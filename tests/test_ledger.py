"""The Ledger's Python face on real SQLite files, read back through independent connections."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ackledger import Conflict, InvalidEvent, Ledger
from ackledger.ledger import DEFAULT_RETENTION_SECONDS, PayloadConflict
from ackledger.store.base import split_statements
from tests.conftest import raw_rows

DAY = 86400.0


@pytest.fixture
def ledger(ledger_db: Path) -> Any:
    with Ledger(ledger_db) as opened:
        yield opened


def _count(db: Path, table: str) -> int:
    (count,) = raw_rows(db, f"SELECT COUNT(*) FROM {table}")[0]
    assert isinstance(count, int)
    return count


def test_a_retry_in_a_new_pod_gets_the_same_delivery(ledger: Ledger, ledger_db: Path) -> None:
    first = ledger.request("case-1", "order-1", "pod-A")
    retry = ledger.request("case-1", "order-1", "pod-B")
    rerun = ledger.request("case-1", "order-1", "pod-C")
    assert first == {"delivery_no": first["delivery_no"], "duplicate": False, "attempt": 1}
    assert retry == {"delivery_no": first["delivery_no"], "duplicate": True, "attempt": 2}
    assert rerun == {"delivery_no": first["delivery_no"], "duplicate": True, "attempt": 3}
    assert raw_rows(ledger_db, "SELECT delivery_no, case_id, work_id FROM deliveries") == [
        (first["delivery_no"], "case-1", "order-1")
    ]
    assert raw_rows(
        ledger_db, "SELECT pod_uid, outcome, delivery_no FROM attempts ORDER BY attempt_no"
    ) == [
        ("pod-A", "applied", first["delivery_no"]),
        ("pod-B", "duplicate", first["delivery_no"]),
        ("pod-C", "duplicate", first["delivery_no"]),
    ]


def test_different_keys_are_different_work(ledger: Ledger) -> None:
    numbers = {
        ledger.request(case_id, work_id, "pod")["delivery_no"]
        for case_id, work_id in [("c1", "w1"), ("c1", "w2"), ("c2", "w1"), ("c2", "w2")]
    }
    assert len(numbers) == 4
    # The key is exact: neither case nor letters are folded.
    assert ledger.request("C1", "w1", "pod")["duplicate"] is False
    assert ledger.request("c1", "W1", "pod")["duplicate"] is False


def test_control_mode_makes_a_delivery_for_every_request(ledger: Ledger, ledger_db: Path) -> None:
    answers = [ledger.request("c", "w", f"pod-{i}", mode="control") for i in range(3)]
    assert [a["duplicate"] for a in answers] == [False, False, False]
    assert [a["attempt"] for a in answers] == [1, 2, 3]
    assert len({a["delivery_no"] for a in answers}) == 3
    assert raw_rows(ledger_db, "SELECT COUNT(*), MIN(mode), MAX(mode) FROM deliveries") == [
        (3, "control", "control")
    ]


def test_control_deliveries_do_not_take_the_idempotent_key(ledger: Ledger) -> None:
    control = ledger.request("c", "w", "pod-A", mode="control")
    first = ledger.request("c", "w", "pod-B")
    again = ledger.request("c", "w", "pod-C")
    assert first["duplicate"] is False and first["delivery_no"] != control["delivery_no"]
    assert again["delivery_no"] == first["delivery_no"] and again["duplicate"] is True
    # The attempt count is per key, whatever the mode.
    assert again["attempt"] == 3


def test_same_payload_is_a_duplicate_whatever_its_key_order(ledger: Ledger) -> None:
    first = ledger.request("c", "w", "pod-A", payload={"sku": "pen", "qty": 2})
    again = ledger.request("c", "w", "pod-B", payload={"qty": 2, "sku": "pen"})
    assert again == {"delivery_no": first["delivery_no"], "duplicate": True, "attempt": 2}


@pytest.mark.parametrize(
    ("created_with", "then"),
    [
        ({"qty": 2}, {"qty": 3}),
        (None, {}),  # no payload fingerprints as JSON null, an empty object does not
        ({"qty": 2}, None),
        ({"qty": 2}, {"qty": 2.5}),
    ],
)
def test_another_payload_is_a_recorded_conflict_without_delivery(
    ledger: Ledger, ledger_db: Path, created_with: Any, then: Any
) -> None:
    first = ledger.request("c", "w", "pod-A", payload=created_with)
    with pytest.raises(PayloadConflict) as refused:
        ledger.request("c", "w", "pod-B", payload=then)
    assert isinstance(refused.value, Conflict)
    assert refused.value.attempt == 2
    assert refused.value.delivery_no == first["delivery_no"]
    # The refusal committed its attempt row (with no delivery) and nothing else.
    assert _count(ledger_db, "deliveries") == 1
    assert raw_rows(
        ledger_db, "SELECT pod_uid, outcome, delivery_no FROM attempts ORDER BY attempt_no"
    ) == [("pod-A", "applied", first["delivery_no"]), ("pod-B", "conflict", None)]
    assert ledger.counters() == {"attempts": 2, "deliveries": 1, "duplicates": 0, "conflicts": 1}
    # The key keeps its first payload: that one is still a duplicate.
    assert ledger.request("c", "w", "pod-C", payload=created_with)["duplicate"] is True


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


GOOD = {"case_id": "c", "work_id": "w", "pod_uid": "pod", "mode": "idempotent", "payload": None}

BAD: list[tuple[str, Any]] = [
    ("case_id", ""),
    ("case_id", "x" * 129),
    ("case_id", "has space"),
    ("case_id", "-starts-with-dash"),
    ("case_id", "é"),
    ("case_id", 5),
    ("case_id", None),
    ("work_id", ""),
    ("work_id", "a/b"),
    ("work_id", b"bytes"),
    ("pod_uid", ""),
    ("pod_uid", "x" * 129),
    ("pod_uid", "pöd"),
    ("pod_uid", "tab\there"),
    ("pod_uid", "new\nline"),
    ("pod_uid", 7),
    ("mode", "Idempotent"),
    ("mode", ""),
    ("mode", None),
    ("mode", 1),
    ("payload", []),
    ("payload", "text"),
    ("payload", 3),
    ("payload", {"a": float("nan")}),
    ("payload", {"a": float("inf")}),
    ("payload", {1: "int key"}),
    ("payload", {"a": object()}),
    ("payload", {"a": (1, 2)}),
    ("payload", {"a": "\ud800"}),
    ("payload", _nested(33)),
]


@pytest.mark.parametrize(("field", "value"), BAD)
def test_bad_input_names_the_field_and_writes_nothing(
    ledger: Ledger, ledger_db: Path, field: str, value: Any
) -> None:
    with pytest.raises(InvalidEvent) as refused:
        ledger.request(**{**GOOD, field: value})
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}:")
    assert _count(ledger_db, "attempts") == 0
    assert _count(ledger_db, "deliveries") == 0
    assert raw_rows(ledger_db, "SELECT COUNT(*) FROM counters WHERE name LIKE 'ledger.%'") == [(0,)]


def test_limits_are_inclusive(ledger: Ledger) -> None:
    answer = ledger.request(
        "c" * 128,
        "A0._:-" + "w" * 122,
        " !~" + "p" * 125,
        mode="control",
        payload=_nested(32) | {"list": [1, "two", None, True, 2.5], "ünï": "cödé"},
    )
    assert answer["duplicate"] is False
    rows = ledger.attempts("c" * 128)
    assert rows[0]["pod_uid"] == " !~" + "p" * 125


def test_listings_filter_by_case_and_keep_their_order(ledger: Ledger) -> None:
    ledger.request("a", "w2", "p1")
    ledger.request("b", "w1", "p2")
    ledger.request("a", "w1", "p3")
    ledger.request("a", "w2", "p4")
    assert [(d["case_id"], d["work_id"]) for d in ledger.deliveries()] == [
        ("a", "w2"),
        ("b", "w1"),
        ("a", "w1"),
    ]
    assert [(d["work_id"], d["pod_uid"]) for d in ledger.deliveries("a")] == [
        ("w2", "p1"),
        ("w1", "p3"),
    ]
    assert [a["pod_uid"] for a in ledger.attempts("a")] == ["p1", "p3", "p4"]
    assert ledger.attempts("nobody") == [] and ledger.deliveries("nobody") == []
    with pytest.raises(InvalidEvent) as refused:
        ledger.attempts("not a case")
    assert refused.value.field == "case_id"


def test_reopening_the_file_keeps_every_number(ledger_db: Path) -> None:
    with Ledger(ledger_db) as first:
        numbers = {w: first.request("c", w, "pod-A")["delivery_no"] for w in ("w1", "w2", "w3")}
    with Ledger(ledger_db, synchronous="NORMAL") as again:
        for work_id, number in numbers.items():
            answer = again.request("c", work_id, "pod-B")
            assert answer == {"delivery_no": number, "duplicate": True, "attempt": 2}
        fresh = again.request("c", "w4", "pod-B")["delivery_no"]
    assert fresh > max(numbers.values())


def test_concurrent_connections_for_one_key_make_one_delivery(ledger_db: Path) -> None:
    clients = 32
    Ledger(ledger_db).close()  # the schema exists before the race starts
    start = threading.Barrier(clients)
    answers: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with Ledger(ledger_db) as own:  # its own SQLite connection
                start.wait()
                answers.append(own.request("race", "order-1", f"pod-{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({a["delivery_no"] for a in answers}) == 1
    assert sorted(a["duplicate"] for a in answers) == [False] + [True] * (clients - 1)
    assert sorted(a["attempt"] for a in answers) == list(range(1, clients + 1))
    assert _count(ledger_db, "deliveries") == 1
    assert _count(ledger_db, "attempts") == clients


def _age(db: Path, work_id: str, days: float) -> None:
    """Make a key's attempts look ``days`` older (a test-side write: time is not mocked)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("UPDATE attempts SET at = at - ? WHERE work_id = ?", (days * DAY, work_id))
    finally:
        conn.close()


def test_purge_forgets_idle_keys_whole_and_keeps_live_ones(ledger: Ledger, ledger_db: Path) -> None:
    old = ledger.request("c", "old", "pod-A")
    ledger.request("c", "old", "pod-B")
    live = ledger.request("c", "live", "pod-A")
    _age(ledger_db, "old", 31)
    _age(ledger_db, "live", 40)
    ledger.request("c", "live", "pod-B")  # asked for again: the key is live, all of it stays

    assert ledger.purge() == {"deliveries": 1, "attempts": 2}
    assert [d["work_id"] for d in ledger.deliveries()] == ["live"]
    assert [a["pod_uid"] for a in ledger.attempts()] == ["pod-A", "pod-B"]
    again = ledger.request("c", "live", "pod-C")
    assert again == {"delivery_no": live["delivery_no"], "duplicate": True, "attempt": 3}

    # A purged key starts fresh: a new number (never an old one reused) and attempt 1.
    fresh = ledger.request("c", "old", "pod-D")
    assert fresh["duplicate"] is False and fresh["attempt"] == 1
    assert fresh["delivery_no"] > max(old["delivery_no"], live["delivery_no"])
    # The counters only grow: purge does not take back what happened.
    assert ledger.counters()["deliveries"] == 3


def test_purge_keeps_keys_inside_the_retention(ledger: Ledger, ledger_db: Path) -> None:
    ledger.request("c", "w", "pod-A", mode="control")
    ledger.request("c", "w", "pod-B")
    _age(ledger_db, "w", 29)
    assert DEFAULT_RETENTION_SECONDS == 30 * DAY
    assert ledger.purge() == {"deliveries": 0, "attempts": 0}
    assert ledger.purge(28 * DAY) == {"deliveries": 2, "attempts": 2}
    assert _count(ledger_db, "deliveries") == 0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "30d", True, None])
def test_purge_refuses_a_meaningless_age(ledger: Ledger, bad: Any) -> None:
    ledger.request("c", "w", "pod")
    with pytest.raises(ValueError, match="older_than_seconds"):
        ledger.purge(bad)
    assert len(ledger.deliveries()) == 1


def test_schema_has_the_contract_names_and_a_partial_key_index(ledger_db: Path) -> None:
    Ledger(ledger_db).close()

    def columns(table: str) -> set[str]:
        return {str(row[1]) for row in raw_rows(ledger_db, f"PRAGMA table_info({table})")}

    assert {"delivery_no", "case_id", "work_id"} <= columns("deliveries")
    assert {"case_id", "work_id", "pod_uid", "mode", "delivery_no"} <= columns("attempts")
    conn = sqlite3.connect(ledger_db, isolation_level=None)
    try:
        insert = (
            "INSERT INTO deliveries (case_id, work_id, mode, fingerprint, pod_uid, created_at) "
            "VALUES ('c', 'w', ?, 'f', 'p', 0)"
        )
        conn.execute(insert, ("control",))
        conn.execute(insert, ("control",))
        conn.execute(insert, ("idempotent",))
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(insert, ("idempotent",))
    finally:
        conn.close()


def _shape(script: str) -> list[tuple[str, list[str]]]:
    """Each statement's first line and the names its lines start with (types stripped)."""
    shape = []
    for statement in split_statements(script):
        lines = [line.strip() for line in statement.splitlines() if line.strip()]
        names = [line.split()[0] for line in lines[1:] if not line.startswith("--")]
        shape.append((lines[0], names))
    return shape


def test_postgres_twin_has_the_same_tables_columns_and_indexes() -> None:
    folder = Path(__file__).parents[1] / "src/ackledger/store/migrations"
    sqlite_sql = (folder / "sqlite/0002_ledger.sql").read_text()
    postgres_sql = (folder / "postgres/0002_ledger.sql").read_text()
    assert _shape(sqlite_sql) == _shape(postgres_sql)
    assert "AUTOINCREMENT" not in postgres_sql and " REAL" not in postgres_sql


@pytest.mark.postgres
def test_postgres_twin_runs_the_ledger_moves_on_a_real_server() -> None:
    """Until the PostgreSQL backend lands, run the twin DDL and the ledger's own statements
    (claim, control insert, attempt, count, purge) through a minimal Tx on a real server."""
    import uuid

    import psycopg

    from ackledger.idempotency import Outcome
    from ackledger.ledger import check_request, record_request
    from ackledger.store import ledger_sql
    from ackledger.store.base import Params, Row, Tx

    class PgTx(Tx):
        dialect = "postgres"

        def __init__(self, conn: psycopg.Connection[Any]) -> None:
            self.conn = conn

        def execute(self, sql: str, params: Params = ()) -> list[Row]:
            cursor = self.conn.execute(sql.replace("?", "%s").encode(), tuple(params))
            return cursor.fetchall() if cursor.description else []

        def executemany(self, sql: str, params: Any) -> None:  # pragma: no cover - unused
            raise NotImplementedError

    folder = Path(__file__).parents[1] / "src/ackledger/store/migrations"
    schema = f"ledger_twin_{uuid.uuid4().hex[:12]}"
    try:
        conn = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=5)
    except psycopg.OperationalError as exc:  # pragma: no cover - CI starts the server
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    with conn:
        conn.autocommit = True
        conn.execute(f"CREATE SCHEMA {schema}".encode())
        try:
            conn.execute(f"SET search_path TO {schema}".encode())
            # counters comes with 0001, which the PostgreSQL backend's author writes.
            conn.execute(b"CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)")
            for statement in split_statements((folder / "postgres/0002_ledger.sql").read_text()):
                conn.execute(statement.encode())
            tx = PgTx(conn)

            def ask(pod: str, mode: str = "idempotent", payload: Any = None) -> Any:
                return record_request(tx, check_request("c", "w", pod, mode, payload), 100.0)

            first, retry = ask("pod-A"), ask("pod-B")
            assert (first.outcome, retry.outcome) == (Outcome.APPLIED, Outcome.DUPLICATE)
            assert retry.delivery_no == first.delivery_no and retry.attempt == 2
            assert ask("pod-C", payload={"a": 1}).outcome is Outcome.CONFLICT
            control = ask("pod-D", mode="control")
            assert control.outcome is Outcome.APPLIED and control.delivery_no != first.delivery_no
            assert [row["pod_uid"] for row in ledger_sql.attempts(tx, "c")] == [
                "pod-A", "pod-B", "pod-C", "pod-D",
            ]  # fmt: skip
            assert ledger_sql.counters(tx, "ledger.") == {
                "attempts": 4, "deliveries": 2, "duplicates": 1, "conflicts": 1,
            }  # fmt: skip
            assert ledger_sql.purge_idle_keys(tx, 100.0) == (0, 0)
            assert ledger_sql.purge_idle_keys(tx, 100.5) == (2, 4)
            assert ledger_sql.deliveries(tx, None) == []
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE".encode())
