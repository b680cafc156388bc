"""The Kubernetes manifests under deploy/k8s: valid (offline, strict) and saying what we mean."""

from __future__ import annotations

import os
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
    assert len(MANIFESTS) >= 5
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
    labels = _pod_spec_labels(found[("ledger-deployment.yaml", "Deployment")])
    assert service["spec"]["selector"].items() <= labels.items()
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
    assert 'pip install ".[server]"' in dockerfile
    assert 'ENTRYPOINT ["ackledger"]' in dockerfile
    assert "USER 10001" in dockerfile
    for (_, _), resource in _resources().items():
        if resource["kind"] in ("Deployment", "Job", "CronJob"):
            for container in _pod_spec(resource)["containers"]:
                assert container["image"] == "ackledger:0.1.0"
