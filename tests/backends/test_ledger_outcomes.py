"""Ledger outcomes on every backend: states, results, claims, 409 in flight, the takeover of a
dead Pod's claim, the upgrade of a 0007 database, and races of 64 requests on one key (through
the Python API on PostgreSQL, through a real ``serve ledger`` process on both). Everything is
read back through a connection of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ackledger import InvalidEvent, Ledger
from ackledger.ledger.ledger import NO_PAYLOAD_FINGERPRINT
from ackledger.ledger.outcomes import InFlight, UnknownDelivery
from ackledger.ops.processes import Service
from ackledger.store import open_backend
from ackledger.store.base import migrate, migrations

from ..race import Client, at_once, connected
from .conftest import Target
from .test_ledger_service import StartLedger, start_ledger  # noqa: F401  (a fixture)

RACERS = 64


@pytest.fixture
def ledger(target: Target) -> Iterator[Ledger]:
    with Ledger(target.ref) as opened:
        yield opened


def _age_claim(target: Target, work_id: str, seconds: float) -> None:
    """Move a claim's start into the past, as if its Pod had died ``seconds`` ago."""
    target.execute(
        "UPDATE ackledger_deliveries SET claimed_at = claimed_at - ? WHERE work_id = ?",
        (seconds, work_id),
    )


def _claims(target: Target, work_id: str) -> list[tuple[Any, ...]]:
    return target.rows(
        "SELECT pod_uid, outcome, claim, exit_status FROM ackledger_attempts WHERE work_id = ? "
        "ORDER BY attempt_no",
        (work_id,),
    )


def test_a_completed_delivery_answers_every_later_request_with_its_result(
    ledger: Ledger, target: Target
) -> None:
    first = ledger.request("c", "w", "pod-A")
    assert first["state"] == "in_progress" and "result" not in first
    done = ledger.complete("c", "w", {"shipped": 3, "label": "é"}, pod_uid="pod-A")
    assert done["state"] == "completed" and done["duplicate"] is False
    assert done["result"] == {"shipped": 3, "label": "é"} and done["completed_by"] == "pod-A"
    for pod, ttl in (("pod-B", None), ("pod-C", 60.0)):
        again = ledger.request("c", "w", pod, claim_ttl=ttl)
        assert again["delivery_no"] == first["delivery_no"] and again["duplicate"] is True
        assert again["state"] == "completed" and again["result"] == done["result"]
        assert "claim" not in again  # completed work is not claimed: nothing to run
    # The first completion wins; a second one (another result) changes nothing.
    later = ledger.complete("c", "w", {"shipped": 4})
    assert later["duplicate"] is True and later["result"] == done["result"]
    assert target.rows("SELECT state, result, completed_by FROM ackledger_deliveries") == [
        ("completed", '{"label":"é","shipped":3}', "pod-A")
    ]
    assert [row[2] for row in _claims(target, "w")] == [None, None, None]


def test_a_live_claim_is_refused_and_an_expired_one_is_taken_over(
    ledger: Ledger, target: Target
) -> None:
    first = ledger.request("c", "w", "pod-A", claim_ttl=60)
    token_a = first["claim"]["token"]
    assert first["claim"]["taken_over"] is False and first["state"] == "in_progress"
    with pytest.raises(InFlight) as refused:
        ledger.request("c", "w", "pod-B", claim_ttl=60)
    assert refused.value.claimed_by == "pod-A" and refused.value.attempt == 2
    assert 0 < refused.value.retry_after <= 60
    # Pod A dies; once its claim is older than B's claim_ttl, B takes it over.
    _age_claim(target, "w", 61)
    taken = ledger.request("c", "w", "pod-B", claim_ttl=60)
    assert taken["claim"]["taken_over"] is True and taken["claim"]["token"] != token_a
    with pytest.raises(InFlight) as held:
        ledger.request("c", "w", "pod-C", claim_ttl=60)
    assert held.value.claimed_by == "pod-B"
    # A was only slow: its late release frees nothing of B's claim...
    assert ledger.release("c", "w", token_a, exit_status=1)["released"] is False
    with pytest.raises(InFlight):
        ledger.request("c", "w", "pod-D", claim_ttl=60)
    # ...and B's completion is recorded on the attempt that took the claim.
    ledger.complete("c", "w", claim=taken["claim"]["token"], pod_uid="pod-B")
    assert _claims(target, "w") == [
        ("pod-A", "applied", "claimed", 1),
        ("pod-B", "duplicate", "in_flight", None),
        ("pod-B", "duplicate", "taken_over", 0),
        ("pod-C", "duplicate", "in_flight", None),
        ("pod-D", "duplicate", "in_flight", None),
    ]
    assert target.rows("SELECT state, claim_token, claimed_by FROM ackledger_deliveries") == [
        ("completed", None, None)
    ]


def test_a_release_frees_the_claim_at_once_and_keeps_the_work_in_progress(
    ledger: Ledger, target: Target
) -> None:
    first = ledger.request("c", "w", "pod-A", claim_ttl=300)
    gone = ledger.release("c", "w", first["claim"]["token"], exit_status=3)
    assert gone == {"delivery_no": first["delivery_no"], "state": "in_progress", "released": True}
    retry = ledger.request("c", "w", "pod-B", claim_ttl=300)
    assert retry["claim"]["taken_over"] is False and retry["state"] == "in_progress"
    assert _claims(target, "w") == [
        ("pod-A", "applied", "claimed", 3),
        ("pod-B", "duplicate", "claimed", None),
    ]


def test_control_deliveries_are_claimed_and_completed_by_their_claim(ledger: Ledger) -> None:
    one = ledger.request("c", "w", "pod-A", mode="control", claim_ttl=60)
    two = ledger.request("c", "w", "pod-B", mode="control", claim_ttl=60)
    assert one["delivery_no"] != two["delivery_no"]  # each a new delivery, each claimable
    done = ledger.complete("c", "w", "ok", claim=two["claim"]["token"])
    assert done["delivery_no"] == two["delivery_no"] and done["result"] == "ok"
    states = {d["delivery_no"]: d["state"] for d in ledger.deliveries("c")}
    assert states == {one["delivery_no"]: "in_progress", two["delivery_no"]: "completed"}
    with pytest.raises(UnknownDelivery):  # a control key has no idempotent delivery
        ledger.complete("c", "w")


def test_bad_reports_and_claims_name_the_field_and_write_nothing(
    ledger: Ledger, target: Target
) -> None:
    token = ledger.request("c", "w", "pod-A", claim_ttl=60)["claim"]["token"]
    before = target.dump()
    bad_requests: list[tuple[object, str]] = [
        (0, "claim_ttl"), (-1, "claim_ttl"), (True, "claim_ttl"), ("60", "claim_ttl"),
        (float("nan"), "claim_ttl"), (86401, "claim_ttl"),
    ]  # fmt: skip
    for ttl, field in bad_requests:
        with pytest.raises(InvalidEvent) as refused:
            ledger.request("c", "w", "pod-B", claim_ttl=ttl)  # type: ignore[arg-type]
        assert refused.value.field == field, ttl
    bad_completes: list[tuple[dict[str, Any], str]] = [
        ({"case_id": "not a case"}, "case_id"),
        ({"work_id": ""}, "work_id"),
        ({"result": float("inf")}, "result"),
        ({"result": {1: "x"}}, "result"),
        ({"claim": "xyz"}, "claim"),
        ({"claim": token.upper()}, "claim"),
        ({"pod_uid": "tab\there"}, "pod_uid"),
    ]
    for change, field in bad_completes:
        args: dict[str, Any] = {"case_id": "c", "work_id": "w"} | change
        with pytest.raises(InvalidEvent) as refused:
            ledger.complete(**args)
        assert refused.value.field == field, change
    for status in (256, -256, True, "1", 1.0):
        with pytest.raises(InvalidEvent) as refused:
            ledger.release("c", "w", token, exit_status=status)  # type: ignore[arg-type]
        assert refused.value.field == "exit_status", status
    with pytest.raises(UnknownDelivery):
        ledger.complete("c", "nobody")
    with pytest.raises(UnknownDelivery):
        ledger.release("c", "w", "0" * 32)
    assert target.dump() == before


def test_a_database_at_0007_upgrades_and_its_deliveries_read_in_progress(
    request: pytest.FixtureRequest, target: Target
) -> None:
    postgres = target.dialect == "postgres"
    ref = request.getfixturevalue("pg_empty_url") if postgres else target.ref + ".0007"
    backend = open_backend(ref, migrate_schema=False)
    try:
        migrate(backend, upto=7)
    finally:
        backend.close()
    old = Target(target.dialect, ref)
    old.execute(
        "INSERT INTO ackledger_deliveries (case_id, work_id, mode, fingerprint, pod_uid, "
        "created_at) "
        "VALUES ('c', 'old-1', 'idempotent', ?, 'pod-old', 1.0)",
        (NO_PAYLOAD_FINGERPRINT,),
    )
    number = old.rows("SELECT delivery_no FROM ackledger_deliveries")[0][0]
    old.execute(
        "INSERT INTO ackledger_attempts (case_id, work_id, pod_uid, mode, delivery_no, outcome, "
        "fingerprint, at) VALUES ('c', 'old-1', 'pod-old', 'idempotent', ?, 'applied', ?, 1.0)",
        (number, NO_PAYLOAD_FINGERPRINT),
    )
    with Ledger(ref) as upgraded:  # opening migrates to the newest version
        listed = upgraded.deliveries("c")
        assert [(d["delivery_no"], d["state"], d["result"]) for d in listed] == [
            (number, "in_progress", None)
        ]
        # The ledger never learned whether that work finished: a --run retry does it again.
        retry = upgraded.request("c", "old-1", "pod-new", claim_ttl=60)
        assert retry["delivery_no"] == number and retry["duplicate"] is True
        assert retry["attempt"] == 2 and "token" in retry["claim"]
        upgraded.complete("c", "old-1", {"redone": True}, claim=retry["claim"]["token"])
        assert upgraded.request("c", "old-1", "pod-later")["result"] == {"redone": True}
    newest = migrations("sqlite")[-1][0]  # 0008 and every migration after it ran
    assert newest >= 8
    assert old.rows("SELECT MAX(version) FROM ackledger_schema_migrations") == [(newest,)]


def _race(ledgers: list[Ledger], work_id: str) -> list[dict[str, Any] | InFlight]:
    def ask(i: int, own: Ledger) -> dict[str, Any] | InFlight:
        try:
            return own.request("race", work_id, f"pod-{i}", claim_ttl=300)
        except InFlight as exc:
            return exc

    return at_once(ledgers, ask, ready=lambda own: own.deliveries("warm-up"))


@pytest.mark.postgres
@pytest.mark.slow
def test_64_connections_racing_for_one_key_make_one_claim_on_postgres(pg_url: str) -> None:
    ledgers = [Ledger(pg_url) for _ in range(RACERS)]
    target = Target("postgres", pg_url)
    try:
        answers = _race(ledgers, "order-1")
        claimed = [a for a in answers if isinstance(a, dict) and "claim" in a]
        refused = [a for a in answers if isinstance(a, InFlight)]
        assert len(claimed) == 1 and len(refused) == RACERS - 1
        assert {a.claimed_by for a in refused} == {f"pod-{answers.index(claimed[0])}"}
        assert sorted([claimed[0]["attempt"]] + [a.attempt for a in refused]) == list(
            range(1, RACERS + 1)
        )
        ledgers[0].complete("race", "order-1", [1, 2], claim=claimed[0]["claim"]["token"])
        after = _race(ledgers, "order-1")
    finally:
        for own in ledgers:
            own.close()
    assert all(isinstance(a, dict) and a["state"] == "completed" for a in after)
    assert {repr(a["result"]) for a in after if isinstance(a, dict)} == {"[1, 2]"}
    assert target.rows(
        "SELECT claim, COUNT(*) FROM ackledger_attempts GROUP BY claim ORDER BY claim NULLS LAST"
    ) == [("claimed", 1), ("in_flight", RACERS - 1), (None, RACERS)]
    assert target.rows("SELECT COUNT(*) FROM ackledger_deliveries") == [(1,)]


@pytest.mark.slow
def test_64_clients_racing_a_ledger_process_for_one_key_make_one_claim(
    request: pytest.FixtureRequest, target: Target
) -> None:
    start: StartLedger = request.getfixturevalue("start_ledger")
    service: Service = start("a")
    pool = [Client(service) for _ in range(RACERS)]
    body = {"case_id": "race", "work_id": "order-1", "claim_ttl": 300}
    try:
        first = at_once(pool, lambda i, c: c.deliver(pod_uid=f"pod-{i}", **body), ready=connected)
        statuses = sorted(status for status, _, _ in first)
        assert statuses == [201] + [409] * (RACERS - 1)
        won = next(i for i, (status, _, _) in enumerate(first) if status == 201)
        winner = first[won][2]
        for status, response, answer in first:
            if status == 409:
                assert answer["type"].endswith("/in-flight")
                assert answer["claimed_by"] == f"pod-{won}"
                assert answer["delivery_no"] == winner["delivery_no"]
                assert int(response.getheader("Retry-After") or 0) >= 1
        status, _, done = pool[0].post(
            "/deliveries/complete",
            {"case_id": "race", "work_id": "order-1", "result": {"ok": True},
             "claim": winner["claim"]["token"]},
        )  # fmt: skip
        assert status == 200 and done["state"] == "completed"
        after = at_once(pool, lambda i, c: c.deliver(pod_uid=f"pod-{i}", **body), ready=connected)
    finally:
        for client in pool:
            client.close()
    assert {status for status, _, _ in after} == {200}
    assert all(a["state"] == "completed" and a["result"] == {"ok": True} for _, _, a in after)
    assert target.rows(
        "SELECT claim, COUNT(*) FROM ackledger_attempts WHERE claim IS NOT NULL GROUP BY "
        "claim ORDER BY claim"
    ) == [("claimed", 1), ("in_flight", RACERS - 1)]
    assert target.rows("SELECT COUNT(*), MIN(state) FROM ackledger_deliveries") == [
        (1, "completed")
    ]
