"""The image and the manifests as CONTRACT v2 section 9 asks: every service bound beyond
loopback reads a bearer token from a file, the file is a Secret mounted read-only, and every
client of a service sends the same token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate.utils import resources_from_file

ROOT = Path(__file__).parents[1]
K8S = ROOT / "deploy" / "k8s"
CALLERS = ("relay", "deliver")


def _pod_spec(resource: dict[str, Any]) -> dict[str, Any]:
    if resource["kind"] == "CronJob":
        return dict(resource["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(resource["spec"]["template"]["spec"])


def _words(container: dict[str, Any]) -> list[str]:
    return " ".join([*container.get("command", []), *container.get("args", [])]).split()


def _workloads() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for resource in resources_from_file(str(path)):
            if resource["kind"] in ("Deployment", "Job", "CronJob"):
                spec = _pod_spec(resource)
                found += [(path.name, spec, container) for container in spec["containers"]]
    return found


def _token_path(spec: dict[str, Any], container: dict[str, Any], words: list[str]) -> str:
    path = words[words.index("--token-file") + 1]
    secrets = {
        v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v
    }
    mounts = [
        m for m in container.get("volumeMounts", [])
        if m["name"] in secrets and path.startswith(m["mountPath"].rstrip("/") + "/")
    ]  # fmt: skip
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True, container["name"]
    assert secrets[mounts[0]["name"]] == "ackledger-token"
    return path


@pytest.mark.parametrize(("name", "spec", "container"), _workloads())
def test_services_and_their_clients_carry_the_token_from_a_secret(
    name: str, spec: dict[str, Any], container: dict[str, Any]
) -> None:
    words = _words(container)
    serves = "serve" in words
    calls = any(word in words for word in CALLERS) and any("http://" in w for w in words)
    if not (serves or calls):
        return  # e.g. the purge sidecar: no HTTP
    assert "--insecure-no-token" not in words
    assert "--token-file" in words, f"{name}: {container['name']} has no --token-file"
    _token_path(spec, container, words)


def test_the_image_serves_with_a_token_file() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = dockerfile[dockerfile.index("CMD [") :]
    assert '"0.0.0.0"' in cmd and '"--token-file"' in cmd
