"""docs/howto.md's container recipes are right as far as this machine can tell without a container engine:
the compose file and the workflow parse and point at the image's port and health route, the testcontainers
example defines its container (docker-py asks no daemon when given an API version), and the image's own
definition (deploy/image/Containerfile) says what the recipes rely on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).parent.parent
HOWTO = (ROOT / "docs" / "howto.md").read_text(encoding="utf-8")
SECTION = HOWTO[HOWTO.index("## A gateway in any language"):]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.DOTALL)


def _yaml_named(key: str) -> dict[str, Any]:
    documents = [yaml.safe_load(block) for block in _blocks("yaml")]
    found = [document for document in documents if key in document]
    assert len(found) == 1, f"one YAML block with {key!r}"
    return found[0]


def test_the_compose_file_waits_for_a_healthy_backend() -> None:
    compose = _yaml_named("services")
    llmsim = compose["services"]["llmsim"]
    assert llmsim["image"].startswith("localhost/pytest-llmsim:") and "8000:8000" in llmsim["ports"]
    assert "/health" in " ".join(llmsim["healthcheck"]["test"])
    assert compose["services"]["gateway"]["depends_on"]["llmsim"]["condition"] == "service_healthy"


def test_the_workflow_runs_the_backend_as_a_service_container() -> None:
    workflow = _yaml_named("jobs")
    service = workflow["jobs"]["test"]["services"]["llmsim"]
    assert "/health" in service["options"] and service["ports"] == ["8000:8000"]
    assert all(name.startswith("LLMSIM_") for name in service["env"])


def test_the_testcontainers_example_defines_its_container_without_a_daemon() -> None:
    pytest.importorskip("testcontainers")
    namespace: dict[str, Any] = {}
    exec(compile(_blocks("py")[0], "docs/howto.md", "exec"), namespace)  # our own docs' block (a fragment: py)
    container = namespace["llmsim_container"](version="1.44")  # a fixed API version: docker-py asks no daemon
    assert container.image == namespace["IMAGE"]
    assert container.env == {"LLMSIM_TTFT": "0.05", "LLMSIM_ITL": "0.01"}
    assert [str(port) for port in container.ports] == ["8000"]


def test_the_image_serves_what_the_recipes_rely_on() -> None:
    containerfile = (ROOT / "deploy" / "image" / "Containerfile").read_text(encoding="utf-8")
    assert 'ENTRYPOINT ["llmsim", "serve", "--host", "0.0.0.0", "--allow-remote-control"]' in containerfile
    assert "EXPOSE 8000" in containerfile and "/health" in containerfile.split("HEALTHCHECK", 1)[1]
    assert re.search(r"^USER 10001", containerfile, flags=re.MULTILINE)
