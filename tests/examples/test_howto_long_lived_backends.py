"""How-to: a gateway started once per module in front of two long-lived backends.

A real gateway (a LiteLLM proxy, say) takes seconds to start, so it is a
module- or session-scoped fixture, and the backends it points at must live as
long: ``llmsim_module_backends.get(name, **settings)`` starts each once. The
plugin resets them before every test that uses them (settings, the test's
markers, empty metrics and log), so each test still starts clean.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# LiteLLM leaves asyncio event loops (and their socket pairs) of its own unclosed.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def router(llmsim_module_backends):
    primary = llmsim_module_backends.get("primary", model="primary-model")
    secondary = llmsim_module_backends.get("secondary", model="secondary-model")
    return litellm.Router(
        model_list=[
            {"model_name": "primary", "litellm_params": {"model": "openai/primary-model", "api_base": primary.base_url,
                                                         "api_key": "sk-1", "max_retries": 0}},
            {"model_name": "secondary", "litellm_params": {"model": "openai/secondary-model",
                                                           "api_base": secondary.base_url, "api_key": "sk-2",
                                                           "max_retries": 0}},
        ],
        fallbacks=[{"primary": ["secondary"]}],
        num_retries=0,
    )


@pytest.mark.llm_fault("overloaded", model="primary-model", retry_after=0)
def test_fallback_when_the_primary_is_overloaded(router, llmsim_module_backends) -> None:
    router.completion(model="primary", messages=[{"role": "user", "content": "Hi!"}], max_tokens=3)
    llmsim_module_backends["primary"].assert_requests(1, status=503)
    llmsim_module_backends["secondary"].assert_requests(1, status=200)


def test_the_next_test_starts_clean(router, llmsim_module_backends) -> None:
    router.completion(model="primary", messages=[{"role": "user", "content": "Hi!"}], max_tokens=3)
    llmsim_module_backends["primary"].assert_requests(1, status=200)  # no fault, no old requests
    llmsim_module_backends["secondary"].assert_requests(0)
