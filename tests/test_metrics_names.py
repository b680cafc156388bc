"""One naming scheme across the sink, the ledger, the relay and the consumers (Prometheus
conventions), figures read from the database marked ``scope="database"``, latency by route
template, the build; and the alert rules name only metrics that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from ackledger import Outbox, new_event
from ackledger._core.build import version
from ackledger.ledger.app import create_ledger_app
from ackledger.ledger.ledger import Ledger
from ackledger.relay.loop import RelayCounts
from ackledger.relay.metrics import MetricsServer
from ackledger.sink.app import create_sink_app
from ackledger.sink.consume import ConsumeCounts
from ackledger.sink.consume_metrics import ConsumeMetrics
from ackledger.sink.inbox import Inbox

from .inprocess import InProcess

ALERTS = Path(__file__).parents[1] / "deploy" / "prometheus"
#: Every label any of our metrics may carry: each has a small, fixed set of values.
BOUNDED_LABELS = {
    *("scope", "route", "method", "status", "class", "action", "version", "component", "le"),
}
#: Units that are not base units (Prometheus: seconds, bytes).
NOT_BASE_UNITS = re.compile(r"_(ms|millis|milliseconds|us|micros|minutes|hours|kb|mb|s|secs)(_|$)")


def _families(text: str) -> list[Any]:
    return list(text_string_to_metric_families(text))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
        return str(answer.read().decode())


def _lab(event_id: str, qty: int = 1) -> dict[str, Any]:
    return new_event("warehouse.stock.added", {"sku": "tea", "qty": qty}, source="/wh", id=event_id)


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One real scrape of each component, after some traffic."""
    tmp = tmp_path_factory.mktemp("metrics")
    found: dict[str, str] = {}
    with Inbox(tmp / "sink.db") as inbox, InProcess(create_sink_app(inbox)) as sink:
        sink.post("/events", _lab("id-9f3a"))
        sink.post("/events", _lab("id-9f3a"))
        sink.post("/events", _lab("id-9f3a", 2))
        sink.call("GET", "/events/id-9f3a")
        sink.call("GET", "/no/such/route/id-77c1")
        sink.call("BREW", "/events")
        found["sink"] = sink.request("GET", "/metrics")[2].decode()
    with Ledger(tmp / "l.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
        app.deliver(case_id="c", work_id="w")
        app.deliver(case_id="c", work_id="w")
        found["ledger"] = app.request("GET", "/metrics")[2].decode()
    with Outbox(tmp / "source.db", source="/wh") as outbox:
        outbox.publish(_lab("p-1"))
        endpoint = MetricsServer(outbox.stats, RelayCounts(), "127.0.0.1", 0)
        try:
            found["relay"] = _get(endpoint.url + "/metrics")
        finally:
            endpoint.close()
    consumer = ConsumeMetrics(ConsumeCounts(applied=2, duplicate=1), "127.0.0.1", 0)
    try:
        found["consumer"] = _get(consumer.url + "/metrics")
    finally:
        consumer.close()
    yield found


def _ours(text: str) -> list[Any]:
    return [f for f in _families(text) if not f.name.startswith(("python_", "process_"))]


@pytest.mark.parametrize("component", ["sink", "ledger", "relay", "consumer"])
def test_every_name_follows_the_one_scheme(scrapes: dict[str, str], component: str) -> None:
    families = _ours(scrapes[component])
    assert families
    for family in families:
        assert family.name.startswith("ackledger_"), family.name
        # Each component's own prefix; the services' HTTP latency is one name for both.
        prefixes: tuple[str, ...] = (
            f"ackledger_{component}_", "ackledger_http_", "ackledger_build_info"
        )  # fmt: skip
        if component == "ledger":  # the ledger's second face: its idempotency keys
            prefixes += ("ackledger_idempotency_",)
        assert family.name.startswith(prefixes), family.name
        assert not NOT_BASE_UNITS.search(family.name), family.name
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name
            assert set(sample.labels) <= BOUNDED_LABELS, (sample.name, sample.labels)
            assert sample.labels.get("scope", "database") == "database"


@pytest.mark.parametrize("component", ["sink", "ledger", "relay", "consumer"])
def test_each_component_says_which_release_it_runs(scrapes: dict[str, str], component: str) -> None:
    (info,) = [f for f in _families(scrapes[component]) if f.name == "ackledger_build_info"]
    (sample,) = info.samples
    assert sample.labels == {"version": version(), "component": component}
    assert sample.value == 1 and version() != "unknown"


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in _families(text)
        for s in f.samples
        if isinstance(s, Sample)
    }


def test_figures_from_the_database_are_marked_and_the_process_own_are_not(
    scrapes: dict[str, str],
) -> None:
    database = {("scope", "database")}
    sink, ledger = _values(scrapes["sink"]), _values(scrapes["ledger"])
    relay, consumer = _values(scrapes["relay"]), _values(scrapes["consumer"])
    assert sink[("ackledger_sink_applied_total", tuple(database))] == 1
    assert sink[("ackledger_sink_duplicates_total", tuple(database))] == 1
    assert sink[("ackledger_sink_conflicts_total", tuple(database))] == 1
    assert ledger[("ackledger_ledger_duplicates_total", tuple(database))] == 1
    assert relay[("ackledger_relay_pending", tuple(database))] == 1
    assert relay[("ackledger_relay_outbox_sent_total", tuple(database))] == 0
    # This process's own counts: summed across replicas, so never marked.
    assert relay[("ackledger_relay_sends_attempted_total", ())] == 0
    assert consumer[("ackledger_consumer_duplicates_total", ())] == 1
    for name, labels in [*sink, *relay]:
        if name.startswith(("ackledger_http_", "ackledger_relay_sends_")):
            assert ("scope", "database") not in labels, name


def test_latency_is_by_route_template_never_by_id(scrapes: dict[str, str]) -> None:
    text = scrapes["sink"]
    counts = {
        (dict(labels)["route"], dict(labels)["method"], dict(labels)["status"]): value
        for (name, labels), value in _values(text).items()
        if name == "ackledger_http_request_duration_seconds_count"
    }
    assert counts == {
        ("/events", "POST", "200"): 2,
        ("/events", "POST", "422"): 1,
        ("/events/{event_id}", "GET", "200"): 1,
        ("unmatched", "GET", "404"): 1,
        ("/events", "other", "405"): 1,
    }
    assert "id-9f3a" not in text and "id-77c1" not in text and "BREW" not in text


# --- The alert rules -----------------------------------------------------------------------


def _exported(scrapes: dict[str, str]) -> set[str]:
    names = {s.name for text in scrapes.values() for f in _families(text) for s in f.samples}
    return names | {f.name for text in scrapes.values() for f in _families(text)}


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((ALERTS / "alerts.yaml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_names_only_metrics_we_export_and_takes_max_of_database_figures(
    scrapes: dict[str, str],
) -> None:
    exported = _exported(scrapes)
    rules = _rules()
    for rule in rules:
        assert rule["labels"]["severity"] in {"page", "ticket"} and rule["annotations"]["summary"]
        named = re.findall(r"\b(ackledger_\w+)", rule["expr"])
        assert named, rule["alert"]
        for metric in named:
            assert metric in exported, (rule["alert"], metric)
        if 'scope="database"' in rule["expr"]:
            assert rule["expr"].startswith("max("), rule["alert"]  # never sum() over replicas
    watched = " ".join(rule["expr"] for rule in rules)
    for needed in (
        "ackledger_relay_oldest_pending_age_seconds", "ackledger_relay_poison_alerts_total",
        "ackledger_sink_conflicts_total", 'ackledger_build_info{component="relay"}',
    ):  # fmt: skip
        assert needed in watched, needed


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    for command in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]):
        done = subprocess.run(
            ["promtool", *command], cwd=ALERTS, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout + done.stderr


def test_the_metrics_table_in_the_docs_lists_exactly_what_we_export(
    scrapes: dict[str, str],
) -> None:
    docs = (Path(__file__).parents[1] / "docs" / "operations.md").read_text()
    listed = set(re.findall(r"^\| `(ackledger_[a-z_]+)` \|", docs, flags=re.MULTILINE))
    families = {f.name for text in scrapes.values() for f in _ours(text)}
    # The parser names a counter's family without _total, and a histogram's _created apart.
    exported = {
        name
        if name.endswith(("_seconds", "_info")) or name in _gauges(scrapes)
        else name + "_total"
        for name in families
        if not name.endswith("_created")
    }
    assert listed == exported


def _gauges(scrapes: dict[str, str]) -> set[str]:
    return {f.name for text in scrapes.values() for f in _families(text) if f.type == "gauge"}


def test_the_latency_buckets_are_cumulative_with_le_inclusive() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from ackledger.web.observe import _Latencies

    latencies = _Latencies()
    registry = CollectorRegistry()
    registry.register(latencies)
    for seconds in (0.0007, 0.001, 20.0):  # 0.001 is a bound: counted in its own bucket
        latencies.observe(("/events", "POST", "200"), seconds)
    values = _values(generate_latest(registry).decode())
    name = "ackledger_http_request_duration_seconds"

    def bucket(le: str) -> float:
        labels = {"route": "/events", "method": "POST", "status": "200", "le": le}
        return values[(name + "_bucket", tuple(sorted(labels.items())))]

    assert (bucket("0.0005"), bucket("0.001"), bucket("10.0"), bucket("+Inf")) == (0, 2, 2, 3)
    series = (("method", "POST"), ("route", "/events"), ("status", "200"))
    assert values[(name + "_count", series)] == 3
    assert values[(name + "_sum", series)] == pytest.approx(20.0017)
