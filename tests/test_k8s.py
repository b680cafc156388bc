"""The Kubernetes manifests under deploy/k8s: valid (offline, strict) and saying what we mean."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate.utils import resources_from_file

ROOT = Path(__file__).parents[1]
K8S = ROOT / "deploy" / "k8s"
#: A version whose schemas kubernetes-validate ships in the package (no network needed).
KUBERNETES_VERSION = "1.33.0"
MANIFESTS = sorted(K8S.glob("*.yaml"))
#: Readiness asks the database (/readyz); liveness only the process (/healthz): a database
#: outage takes replicas out of the Service without restarting them.
PROBES = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
#: Built from this repository's Dockerfile under a name that says so (not a Docker Hub name).
IMAGE = "localhost/ackledger:0.1.0"
LEDGER_DEPLOYMENTS = (
    "ledger-deployment.yaml", "ledger-deployment-pvc.yaml", "ledger-deployment-postgres.yaml",
)  # fmt: skip


def _validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
         KUBERNETES_VERSION, *map(str, paths)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _resources() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in MANIFESTS:
        for resource in resources_from_file(str(path)):
            found[(path.name, resource["kind"])] = resource
    return found


def _pod_spec(resource: dict[str, Any]) -> dict[str, Any]:
    if resource["kind"] == "CronJob":
        return dict(resource["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(resource["spec"]["template"]["spec"])


def _env(container: dict[str, Any], name: str) -> dict[str, Any]:
    return next(item for item in container.get("env", []) if item["name"] == name)


def test_every_manifest_validates_strictly_offline() -> None:
    assert len(MANIFESTS) >= 10
    done = _validate(*MANIFESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == sum(len(resources_from_file(str(p))) for p in MANIFESTS)


def test_the_validator_is_really_strict(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    text = (K8S / "ledger-service.yaml").read_text()
    broken.write_text(text.replace("  selector:", "  selektor: {}\n  selector:"))
    done = _validate(broken)
    assert done.returncode != 0 and "selektor" in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["ledger-deployment.yaml", "ledger-deployment-pvc.yaml"])
def test_the_ledger_is_one_replica_probed_on_readyz_and_healthz_with_its_pod_uid(name: str) -> None:
    deployment = _resources()[(name, "Deployment")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    spec = _pod_spec(deployment)
    ledger = spec["containers"][0]
    assert ledger["args"][:2] == ["serve", "ledger"]
    port = ledger["ports"][0]
    for probe, path in PROBES.items():
        assert ledger[probe]["httpGet"]["path"] == path
        assert ledger[probe]["httpGet"]["port"] in (port["name"], port["containerPort"])
    assert _env(ledger, "POD_UID")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    db_dir = ledger["args"][ledger["args"].index("--db") + 1].rsplit("/", 1)[0]
    mount = next(m for m in ledger["volumeMounts"] if m["mountPath"] == db_dir)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    if name == "ledger-deployment.yaml":
        assert volume["emptyDir"] == {}
    else:
        claim = _resources()[(name, "PersistentVolumeClaim")]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_the_service_reaches_the_ledger_pods_and_the_workers_use_it() -> None:
    found = _resources()
    service = found[("ledger-service.yaml", "Service")]
    for variant in LEDGER_DEPLOYMENTS:  # apply any one of them: the Service finds its Pods
        deployment = found[(variant, "Deployment")]
        assert deployment["metadata"]["name"] == "ackledger-ledger"
        assert service["spec"]["selector"].items() <= _pod_spec_labels(deployment).items()
        ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in ports}
    url = f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/deliveries"
    job = found[("worker-job.yaml", "Job")]
    args = _pod_spec(job)["containers"][0]["args"]
    assert args[args.index("--ledger") + 1] == url
    assert args[args.index("--allow-host") + 1] == service["metadata"]["name"]
    cron = found[("report-cronjob.yaml", "CronJob")]
    script = " ".join(_pod_spec(cron)["containers"][0]["args"])
    assert f"--ledger {url}" in script and f"--allow-host {service['metadata']['name']}" in script


def _pod_spec_labels(resource: dict[str, Any]) -> dict[str, str]:
    return dict(resource["spec"]["template"]["metadata"]["labels"])


def test_the_worker_job_retries_in_new_pods_with_the_business_key_as_arguments() -> None:
    job = _resources()[("worker-job.yaml", "Job")]
    assert job["spec"]["backoffLimit"] >= 1
    spec = _pod_spec(job)
    assert spec["restartPolicy"] == "Never"  # every retry is a new Pod, as in the seed
    worker = spec["containers"][0]
    assert worker["args"][0] == "deliver"
    assert {"--case-id", "--work-id"} <= set(worker["args"])
    assert _env(worker, "POD_UID")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


def _yesterday_utc() -> str:
    return (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")


def _work_id(script: str, env: dict[str, str]) -> str:
    """Evaluate the script's --work-id word with a real sh, as the container would."""
    word = shlex.split(script.split("--work-id", 1)[1])[0]
    done = subprocess.run(
        ["sh", "-c", f'printf %s "{word}"'], env={"PATH": os.environ["PATH"], **env},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_cronjob_forbids_overlap_and_keys_its_work_by_business_date() -> None:
    cron = _resources()[("report-cronjob.yaml", "CronJob")]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    worker = _pod_spec(cron)["containers"][0]
    assert worker["command"] == ["sh", "-c"]
    script = " ".join(worker["args"])
    assert script.startswith("exec ackledger deliver ")
    # The key is the business day, whatever run asks: two Pods (other POD_UID, other host)
    # get the same work_id, and an operator re-running a past day names that day.
    before = _yesterday_utc()
    first = _work_id(script, {"POD_UID": "pod-1", "HOSTNAME": "report-111"})
    second = _work_id(script, {"POD_UID": "pod-2", "HOSTNAME": "report-222"})
    assert first == second
    assert first in {f"report:{before}", f"report:{_yesterday_utc()}"}
    assert _work_id(script, {"BUSINESS_DATE": "2026-01-31"}) == "report:2026-01-31"
    assert _env(worker, "POD_UID")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


def test_the_dockerfile_builds_the_image_the_manifests_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The PostgreSQL variants need postgres; the broker relays and consumers amqp (and nats).
    assert 'pip install ".[server,postgres,amqp,nats]"' in dockerfile
    assert f"docker build -t {IMAGE} ." in dockerfile
    assert 'ENTRYPOINT ["ackledger"]' in dockerfile
    assert "USER 10001" in dockerfile
    for (_, _), resource in _resources().items():
        if resource["kind"] in ("Deployment", "Job", "CronJob"):
            for container in _pod_spec(resource)["containers"]:
                assert container["image"] == IMAGE


# --- The PostgreSQL variants: many relays, sink and ledger replicas --------------------------

#: What the cluster would put in the variables, to run the manifests' arguments through the
#: real command-line parser (nothing connects anywhere).
SAMPLE_FIELDS = {"metadata.name": "ackledger-relay-7d9f-x2k4q", "metadata.uid": "uid-1234"}
SAMPLE_SECRET = "postgresql://ackledger@postgres.invalid:5432/{key}"
#: The broker URLs a Secret ackledger-rabbitmq would hold (the password never in a manifest).
SAMPLE_BROKER = {
    "relay-url": "amqp://ackledger:pw@rabbitmq:5672/%2F?exchange=orders",
    "consumer-url": "amqp://ackledger:pw@rabbitmq:5672/%2F?queue=shipping",
}
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expanded_args(container: dict[str, Any]) -> list[str]:
    """The container's arguments as Kubernetes expands them. Kubernetes leaves a ``$(NAME)``
    whose variable is not defined as it is, silently, so every reference must be defined."""
    values: dict[str, str] = {}
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "fieldRef" in source:
            values[item["name"]] = SAMPLE_FIELDS[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source and source["secretKeyRef"]["name"] == "ackledger-rabbitmq":
            values[item["name"]] = SAMPLE_BROKER[source["secretKeyRef"]["key"]]
        elif "secretKeyRef" in source:
            values[item["name"]] = SAMPLE_SECRET.format(key=source["secretKeyRef"]["key"])
        else:
            values[item["name"]] = item["value"]

    def expand(arg: str) -> str:
        for name in _VAR_REF.findall(arg):
            assert name in values, f"$({name}) is not defined in the container's env"
        return _VAR_REF.sub(lambda found: values[found.group(1)], arg)

    return [expand(arg) for arg in container["args"]]


def _parsed(container: dict[str, Any]) -> Any:
    from ackledger.cli import build_parser

    return build_parser().parse_args(_expanded_args(container))


def _secret_key(container: dict[str, Any], name: str) -> str:
    ref = _env(container, name)["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "ackledger-postgres"
    return str(ref["key"])


def _port_number(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == port))


def _assert_ready_on_its_metrics(container: dict[str, Any], args: Any) -> None:
    """Ready when its metrics answer: the probe asks the port it serves them on, reachable
    from outside the Pod."""
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/metrics"
    assert _port_number(container, probe["port"]) == args.metrics_port
    assert args.metrics_host == "0.0.0.0"


def _service_url(service: dict[str, Any], path: str) -> str:
    return f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}{path}"


def test_no_manifest_holds_a_database_url_or_a_password() -> None:
    for path in MANIFESTS:
        text = path.read_text()
        # No "user:password@" in any URL, not even in a comment (PASSWORD: a placeholder).
        for found in re.finditer(r"(postgres(ql)?|amqp|nats)://[^\s@/]*:([^\s@/]*)@", text):
            assert found.group(3) == "PASSWORD", path.name
        for resource in resources_from_file(str(path)):
            if resource["kind"] not in ("Deployment", "Job", "CronJob"):
                continue
            for container in _pod_spec(resource)["containers"]:
                for item in container.get("env", []):
                    if item["name"] in ("DATABASE_URL", "PGPASSWORD", "BROKER_URL"):
                        assert "value" not in item and "secretKeyRef" in item["valueFrom"]
                assert not any("://" in arg and "@" in arg for arg in container["args"]), path.name


def test_the_relays_run_as_n_leasing_partitions_and_send_to_the_sink_service() -> None:
    found = _resources()
    relay = found[("relay-deployment.yaml", "Deployment")]
    assert relay["spec"]["replicas"] >= 2
    assert relay["spec"]["strategy"]["type"] == "RollingUpdate"  # leases keep replicas apart
    spec = _pod_spec(relay)
    container = spec["containers"][0]
    args = _parsed(container)
    assert (args.command, args.single) == ("relay", False)
    # A postgresql:// source is what makes `ackledger relay` lease partitions (one of N).
    assert args.source == SAMPLE_SECRET.format(key=_secret_key(container, "DATABASE_URL"))
    assert args.owner == SAMPLE_FIELDS["metadata.name"]  # each Pod its own lease owner
    assert _env(container, "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert args.batch is True and args.on_poison == "quarantine"
    sink_service = found[("sink-service.yaml", "Service")]
    assert args.to == _service_url(sink_service, "/events")
    assert args.allow_host == [sink_service["metadata"]["name"]]
    _assert_ready_on_its_metrics(container, args)
    # SIGTERM finishes the request in flight and releases the leases within the grace period.
    assert spec["terminationGracePeriodSeconds"] > args.timeout
    assert _env(container, "PGPASSWORD")["valueFrom"]["secretKeyRef"]["optional"] is True


def test_the_postgres_sink_has_replicas_behind_its_service_probed_on_readyz_and_healthz() -> None:
    found = _resources()
    sink = found[("sink-deployment-postgres.yaml", "Deployment")]
    assert sink["spec"]["replicas"] >= 2
    container = _pod_spec(sink)["containers"][0]
    args = _parsed(container)
    assert (args.command, args.service) == ("serve", "sink")
    assert args.db == SAMPLE_SECRET.format(key=_secret_key(container, "DATABASE_URL"))
    assert args.host == "0.0.0.0"
    for probe, path in PROBES.items():
        assert container[probe]["httpGet"]["path"] == path
        assert _port_number(container, container[probe]["httpGet"]["port"]) == args.port
    service = found[("sink-service.yaml", "Service")]
    assert service["spec"]["selector"].items() <= _pod_spec_labels(sink).items()
    assert _port_number(container, service["spec"]["ports"][0]["targetPort"]) == args.port


def test_the_postgres_ledger_has_replicas_and_rolls_updates_unlike_sqlite() -> None:
    found = _resources()
    ledger = found[("ledger-deployment-postgres.yaml", "Deployment")]
    # The memory is in PostgreSQL: replicas share it, and an old and a new Pod may overlap.
    assert ledger["spec"]["replicas"] >= 2
    assert ledger["spec"]["strategy"]["type"] == "RollingUpdate"
    assert ledger["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    container = _pod_spec(ledger)["containers"][0]
    args = _parsed(container)
    assert (args.command, args.service) == ("serve", "ledger")
    key = _secret_key(container, "DATABASE_URL")
    assert args.db == SAMPLE_SECRET.format(key=key)
    assert _env(container, "POD_UID")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    for probe, path in PROBES.items():
        assert container[probe]["httpGet"]["path"] == path
        assert _port_number(container, container[probe]["httpGet"]["port"]) == args.port
    # No local state at all: the only volume is the bearer token's Secret.
    assert all("secret" in volume for volume in _pod_spec(ledger).get("volumes", []))
    # Retention runs once for all replicas, on the same database.
    cron = found[("ledger-purge-cronjob.yaml", "CronJob")]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    purge = _pod_spec(cron)["containers"][0]
    purge_args = _parsed(purge)
    assert (purge_args.command, purge_args.action) == ("ledger", "purge")
    assert _secret_key(purge, "DATABASE_URL") == key
    assert purge_args.db == args.db
    assert purge_args.older_than == 30 * 86400


# --- Hardening: Pod Security "restricted", disruption budgets, network policy ---------------

WORKLOADS = ("Deployment", "Job", "CronJob")


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    return [(name, res) for (name, kind), res in _resources().items() if kind in WORKLOADS]


def test_every_pod_meets_the_restricted_pod_security_profile() -> None:
    assert len(_workloads()) >= 10
    for name, resource in _workloads():
        spec = _pod_spec(resource)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, (name, container["name"])
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]}


def test_a_sqlite_database_is_only_ever_on_a_mounted_volume() -> None:
    """The root filesystem is read-only: whatever a container writes (a SQLite file and its
    WAL) must be on an emptyDir or a claim."""
    seen = 0
    for name, resource in _workloads():
        spec = _pod_spec(resource)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            words = " ".join(container.get("args", [])).split()
            for i, word in enumerate(words[:-1]):
                if word == "--db" and words[i + 1].startswith("/"):
                    seen += 1
                    directory = words[i + 1].rsplit("/", 1)[0]
                    mount = next(
                        m for m in container["volumeMounts"] if m["mountPath"] == directory
                    )
                    volume = volumes[mount["name"]]
                    assert "emptyDir" in volume or "persistentVolumeClaim" in volume, name
                    assert not mount.get("readOnly", False)
    assert seen >= 4  # the SQLite ledgers and their purge sidecars


def _template_labels(resource: dict[str, Any]) -> dict[str, str]:
    if resource["kind"] == "CronJob":
        return dict(resource["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"])
    return _pod_spec_labels(resource)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_disruption_budgets_keep_a_ledger_and_a_sink_running() -> None:
    found = _resources()
    budgets = {
        "ledger-pdb.yaml": LEDGER_DEPLOYMENTS,
        "sink-pdb.yaml": ("sink-deployment-postgres.yaml",),
    }
    for budget_file, deployments in budgets.items():
        budget = found[(budget_file, "PodDisruptionBudget")]
        assert budget["spec"]["minAvailable"] == 1
        for deployment in deployments:
            labels = _pod_spec_labels(found[(deployment, "Deployment")])
            assert _selects(budget["spec"]["selector"], labels), (budget_file, deployment)


def test_network_policies_let_our_pods_reach_the_services_and_scrapers_the_metrics() -> None:
    docs = resources_from_file(str(K8S / "networkpolicy.yaml"))
    services, metrics_only = (
        next(d for d in docs if d["metadata"]["name"] == name)
        for name in ("ackledger-services", "ackledger-metrics-only")
    )
    pods = {name: (res, _template_labels(res)) for name, res in _workloads()}
    for name, (resource, labels) in pods.items():
        containers = _pod_spec(resource)["containers"]
        ports = {p.get("name") for c in containers for p in c.get("ports", [])}
        # Every one of our Pods is a permitted client of the services.
        assert labels.get("app.kubernetes.io/part-of") == "ackledger", name
        for policy in (services, metrics_only):
            if _selects(policy["spec"]["podSelector"], labels):
                assert policy["spec"]["policyTypes"] == ["Ingress"]
                for rule in policy["spec"]["ingress"]:
                    assert {p["port"] for p in rule["ports"]} <= ports, (name, ports)
    selected = {
        policy["metadata"]["name"]: {
            name
            for name, (_, labels) in pods.items()
            if _selects(policy["spec"]["podSelector"], labels)
        }
        for policy in (services, metrics_only)
    }
    assert selected["ackledger-services"] >= {"sink-deployment-postgres.yaml", *LEDGER_DEPLOYMENTS}
    assert selected["ackledger-metrics-only"] >= {
        "relay-deployment.yaml", "relay-amqp-deployment.yaml", "consumer-amqp-deployment.yaml",
    }  # fmt: skip
    # The metrics-only Pods take no traffic from our own Pods, only from the scrapers.
    (rule,) = metrics_only["spec"]["ingress"]
    assert all("podSelector" not in peer for peer in rule["from"])


# --- The relay to RabbitMQ and the consumer from it ---------------------------------------


def test_the_amqp_relay_leases_partitions_and_sends_to_the_broker_from_its_secret() -> None:
    found = _resources()
    relay = found[("relay-amqp-deployment.yaml", "Deployment")]
    assert relay["spec"]["replicas"] >= 2
    spec = _pod_spec(relay)
    container = spec["containers"][0]
    args = _parsed(container)
    assert (args.command, args.batch, args.on_poison) == ("relay", True, "quarantine")
    assert args.source == SAMPLE_SECRET.format(key=_secret_key(container, "DATABASE_URL"))
    assert args.to == SAMPLE_BROKER["relay-url"]
    assert args.allow_host == ["rabbitmq"] and args.owner == SAMPLE_FIELDS["metadata.name"]
    _assert_ready_on_its_metrics(container, args)
    assert spec["terminationGracePeriodSeconds"] > args.timeout


def test_the_amqp_consumer_applies_into_the_shared_inbox() -> None:
    found = _resources()
    consumer = found[("consumer-amqp-deployment.yaml", "Deployment")]
    assert consumer["spec"]["replicas"] >= 2
    container = _pod_spec(consumer)["containers"][0]
    args = _parsed(container)
    assert args.command == "consume"
    assert args.source == SAMPLE_BROKER["consumer-url"]
    assert args.allow_host == ["rabbitmq"]
    # The same inbox as the HTTP sink's replicas: one inbox, however events arrive.
    sink = _pod_spec(found[("sink-deployment-postgres.yaml", "Deployment")])["containers"][0]
    assert args.db == _parsed(sink).db
    _assert_ready_on_its_metrics(container, args)


def test_the_inbox_purge_cronjob_purges_the_sinks_database_once_for_all_replicas() -> None:
    found = _resources()
    sink = _pod_spec(found[("sink-deployment-postgres.yaml", "Deployment")])["containers"][0]
    sink_args = _parsed(sink)
    cron = found[("sink-inbox-purge-cronjob.yaml", "CronJob")]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    purge = _pod_spec(cron)["containers"][0]
    args = _parsed(purge)
    assert (args.command, args.action) == ("inbox", "purge")
    assert _secret_key(purge, "DATABASE_URL") == _secret_key(sink, "DATABASE_URL")
    assert args.db == sink_args.db
    assert args.older_than == 30 * 86400 and args.force is False
