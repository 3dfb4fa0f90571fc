"""How-to: test a gateway's fallback with two simulated backends (LiteLLM's Router).

The primary deployment answers every request with a 429 (or a 503); the
router must fall back to the secondary. Both backends' metrics show what the
gateway did. LiteLLM stays offline with LITELLM_LOCAL_MODEL_COST_MAP=True.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# LiteLLM leaves asyncio event loops (and their socket pairs) of its own unclosed.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def make_router(primary_url: str, secondary_url: str) -> litellm.Router:
    return litellm.Router(
        model_list=[
            {"model_name": "primary",
             "litellm_params": {"model": "openai/primary-model", "api_base": primary_url,
                                "api_key": "sk-primary", "max_retries": 0}},
            {"model_name": "secondary",
             "litellm_params": {"model": "openai/secondary-model", "api_base": secondary_url,
                                "api_key": "sk-secondary", "max_retries": 0}},
        ],
        fallbacks=[{"primary": ["secondary"]}],
        num_retries=0,
    )


@pytest.mark.parametrize(("kind", "status"), [("rate_limit", 429), ("overloaded", 503)])
def test_router_falls_back_to_the_secondary(llm_backend_factory, kind: str, status: int) -> None:
    primary = llm_backend_factory(model="primary-model")
    secondary = llm_backend_factory(model="secondary-model")
    primary.add_fault(kind, retry_after=0)

    router = make_router(primary.base_url, secondary.base_url)
    response = router.completion(model="primary", messages=[{"role": "user", "content": "Hi!"}],
                                 max_tokens=5)

    assert response.choices[0].message.content
    assert response.usage.completion_tokens == 5
    primary.assert_requests(1, status=status)
    assert primary.metrics.faults == {kind: 1}
    secondary.assert_requests(1, status=200, model="secondary-model")
    secondary.assert_no_errors()
    assert secondary.metrics.completion_tokens == 5


def test_router_streams_through_the_fallback(llm_backend_factory) -> None:
    primary = llm_backend_factory(model="primary-model")
    secondary = llm_backend_factory(model="secondary-model", ttft=0.05, itl=0.01, speed=float("inf"))
    primary.add_fault("server_error")

    router = make_router(primary.base_url, secondary.base_url)
    chunks = list(router.completion(model="primary", messages=[{"role": "user", "content": "Stream it"}],
                                    max_tokens=6, stream=True))

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len(text.split()) == 6
    primary.assert_requests(1, status=500)
    (served,) = secondary.assert_requests(1, status=200)
    assert served.stream and served.completion_tokens == 6
    assert secondary.metrics.ttft.p50 == 0.05
