"""deploy/kubernetes: every kustomization renders (``kubectl kustomize``) and every object validates offline.

Kubernetes' own kinds against its schemas (``kubernetes-validate``, strict: an unknown field fails); the custom
resources (``InferencePool``, ``ServiceMonitor``) against the schemas kept in ``deploy/kubernetes/schemas/``,
and a custom resource with no schema there fails. No cluster is needed: what "metrics per pod" and "the pool
selects the model servers" mean is checked in the rendered objects. Without ``kubectl`` the tests skip, except
under ``CI=true`` (``.ci/run`` installs Debian's ``kubernetes-client`` as root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

from pytest_llmsim.cli import build_parser, load_config_file  # noqa: E402
from pytest_llmsim.cli.vllm_arguments import vllm_settings  # noqa: E402

DEPLOY = Path(__file__).parent.parent / "deploy" / "kubernetes"
KUSTOMIZATIONS = sorted(path.parent.relative_to(DEPLOY).as_posix() for path in DEPLOY.rglob("kustomization.yaml"))
SCHEMAS = DEPLOY / "schemas"
KUBERNETES_VERSION = "1.30"  # the oldest release the manifests are checked against; newer ones accept them too
CORE_GROUPS = ("v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2", "networking.k8s.io/v1")


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no kubectl under CI=true: install Debian's kubernetes-client (.ci/run does, as root)")
        pytest.skip("no kubectl: install Debian's kubernetes-client to render the manifests")
    return kubectl


def _render(kustomization: str) -> list[dict[str, Any]]:
    result = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / kustomization)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [obj for obj in objects if obj["kind"] == kind and name in (None, obj["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def test_the_overlays_are_the_ones_documented() -> None:
    assert KUSTOMIZATIONS == ["base", "overlays/fleet", "overlays/inference-pool"]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_validates_offline(kustomization: str) -> None:
    objects = _render(kustomization)
    assert objects
    for obj in objects:
        if obj["apiVersion"] in CORE_GROUPS:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            continue
        group, _, version = obj["apiVersion"].rpartition("/")
        schema_file = SCHEMAS / f"{obj['kind'].lower()}-{group}-{version}.json"
        assert schema_file.is_file(), f"no schema for {obj['apiVersion']} {obj['kind']}: add {schema_file.name}"
        jsonschema.Draft202012Validator(json.loads(schema_file.read_text(encoding="utf-8"))).validate(obj)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_the_base_serves_its_config_file_with_probes_and_the_pods_identity(tmp_path: Path) -> None:
    objects = _render("base")
    deployment, config_map = _one(objects, "Deployment"), _one(objects, "ConfigMap")
    container = _container(deployment)
    config_file = tmp_path / "llmsim.toml"
    config_file.write_text(config_map["data"]["llmsim.toml"], encoding="utf-8")
    settings, _ = load_config_file(str(config_file))  # every key a setting with a valid value
    assert settings["max_batch_size"] == 64
    args = build_parser().parse_args(["serve", *container["args"]])
    assert args.config == "/etc/llmsim/llmsim.toml"
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in deployment["spec"]["template"]["spec"]["volumes"]}
    assert mounts["config"] == "/etc/llmsim"
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert {env["name"]: env["valueFrom"]["fieldRef"]["fieldPath"] for env in container["env"]} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    service = _one(objects, "Service")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"] == "http"


def test_the_fleets_metrics_are_per_pod() -> None:
    objects = _render("overlays/fleet")
    deployment = _one(objects, "Deployment")
    assert deployment["spec"]["replicas"] > 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics" and annotations["prometheus.io/port"] == "8000"
    monitor = _one(objects, "ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    # the monitor selects one Service, whose endpoints are the pods: one scrape target per pod
    services = [obj for obj in objects
                if obj["kind"] == "Service" and wanted <= obj["metadata"].get("labels", {}).items()]
    assert len(services) == 1
    assert services[0]["spec"].get("clusterIP") != "None"
    assert services[0]["spec"]["selector"].items() <= pod_labels.items()
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} == {
        port["name"] for port in services[0]["spec"]["ports"]}
    pods = _one(objects, "Service", "llmsim-pods")  # every pod's address, for routers that pick the pod
    assert pods["spec"]["clusterIP"] == "None" and pods["spec"]["selector"].items() <= pod_labels.items()


def test_the_inference_pool_selects_model_servers_that_take_vllms_arguments() -> None:
    objects = _render("overlays/inference-pool")
    deployment, pool = _one(objects, "Deployment"), _one(objects, "InferencePool")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container = _container(deployment)
    assert [port["number"] for port in pool["spec"]["targetPorts"]] == [container["ports"][0]["containerPort"]]
    settings, faults, without_effect = vllm_settings(build_parser().parse_args(["serve", *container["args"]]))
    assert settings["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert settings["lora_adapters"] == ("food-review-1", "ski-resorts")
    assert faults == [] and without_effect == ["--gpu-memory-utilization", "--max-cpu-loras", "--tensor-parallel-size"]
