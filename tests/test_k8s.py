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
def test_the_ledger_is_one_replica_probed_on_healthz_with_its_pod_uid(name: str) -> None:
    deployment = _resources()[(name, "Deployment")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    spec = _pod_spec(deployment)
    ledger = spec["containers"][0]
    assert ledger["args"][:2] == ["serve", "ledger"]
    port = ledger["ports"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert ledger[probe]["httpGet"]["path"] == "/healthz"
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
    assert 'pip install ".[server,postgres]"' in dockerfile  # the PostgreSQL variants need it
    assert 'ENTRYPOINT ["ackledger"]' in dockerfile
    assert "USER 10001" in dockerfile
    for (_, _), resource in _resources().items():
        if resource["kind"] in ("Deployment", "Job", "CronJob"):
            for container in _pod_spec(resource)["containers"]:
                assert container["image"] == "ackledger:0.1.0"


# --- The PostgreSQL variants: many relays, sink and ledger replicas --------------------------

#: What the cluster would put in the variables, to run the manifests' arguments through the
#: real command-line parser (nothing connects anywhere).
SAMPLE_FIELDS = {"metadata.name": "ackledger-relay-7d9f-x2k4q", "metadata.uid": "uid-1234"}
SAMPLE_SECRET = "postgresql://ackledger@postgres.invalid:5432/{key}"
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expanded_args(container: dict[str, Any]) -> list[str]:
    """The container's arguments as Kubernetes expands them. Kubernetes leaves a ``$(NAME)``
    whose variable is not defined as it is, silently, so every reference must be defined."""
    values: dict[str, str] = {}
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "fieldRef" in source:
            values[item["name"]] = SAMPLE_FIELDS[source["fieldRef"]["fieldPath"]]
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


def _service_url(service: dict[str, Any], path: str) -> str:
    return f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}{path}"


def test_no_manifest_holds_a_database_url_or_a_password() -> None:
    for path in MANIFESTS:
        text = path.read_text()
        # No "user:password@" in any URL, not even in a comment.
        assert not re.search(r"postgres(ql)?://[^\s@/]*:[^\s@/]*@", text), path.name
        for resource in resources_from_file(str(path)):
            if resource["kind"] not in ("Deployment", "Job", "CronJob"):
                continue
            for container in _pod_spec(resource)["containers"]:
                for item in container.get("env", []):
                    if item["name"] in ("DATABASE_URL", "PGPASSWORD"):
                        assert "value" not in item and "secretKeyRef" in item["valueFrom"]
                assert not any("postgresql://" in arg for arg in container["args"]), path.name


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
    # Ready when its metrics answer: the probe asks the port the relay serves them on.
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/metrics"
    assert _port_number(container, probe["port"]) == args.metrics_port
    assert args.metrics_host == "0.0.0.0"
    # SIGTERM finishes the request in flight and releases the leases within the grace period.
    assert spec["terminationGracePeriodSeconds"] > args.timeout
    assert _env(container, "PGPASSWORD")["valueFrom"]["secretKeyRef"]["optional"] is True


def test_the_postgres_sink_has_replicas_behind_its_service_probed_on_healthz() -> None:
    found = _resources()
    sink = found[("sink-deployment-postgres.yaml", "Deployment")]
    assert sink["spec"]["replicas"] >= 2
    container = _pod_spec(sink)["containers"][0]
    args = _parsed(container)
    assert (args.command, args.service) == ("serve", "sink")
    assert args.db == SAMPLE_SECRET.format(key=_secret_key(container, "DATABASE_URL"))
    assert args.host == "0.0.0.0"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
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
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
        assert _port_number(container, container[probe]["httpGet"]["port"]) == args.port
    assert "volumes" not in _pod_spec(ledger)  # no local state at all
    # Retention runs once for all replicas, on the same database.
    cron = found[("ledger-purge-cronjob.yaml", "CronJob")]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    purge = _pod_spec(cron)["containers"][0]
    purge_args = _parsed(purge)
    assert (purge_args.command, purge_args.action) == ("ledger", "purge")
    assert _secret_key(purge, "DATABASE_URL") == key
    assert purge_args.db == args.db
    assert purge_args.older_than == 30 * 86400


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
