"""How-to: one LiteLLM Router over Gemini, Bedrock (Converse) and Azure OpenAI backends.

Each deployment is a pytest-llmsim backend speaking that cloud's wire format;
the gateway's OpenAI-style calls come out translated, and a throttled Bedrock
deployment falls back to Gemini. The AWS credentials are dummies that never
refresh; ``loopback_only`` fails the test if anything tries to leave the machine.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
litellm = pytest.importorskip("litellm")

pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.usefixtures("loopback_only")]
CLAUDE = "anthropic.claude-3-haiku-20240307-v1:0"


def cloud_router(gemini, bedrock, azure, **options):
    return litellm.Router(model_list=[
        {"model_name": "gemini", "litellm_params": {
            "model": "gemini/gemini-2.5-flash", "api_base": gemini.root_url + "/v1beta", "api_key": "test"}},
        {"model_name": "bedrock", "litellm_params": {
            "model": f"bedrock/converse/{CLAUDE}", "aws_bedrock_runtime_endpoint": bedrock.root_url,
            "aws_access_key_id": "AKIDTEST", "aws_secret_access_key": "test", "aws_region_name": "us-east-1"}},
        {"model_name": "azure", "litellm_params": {
            "model": "azure/gpt-4o", "api_base": azure.root_url, "api_version": "2024-10-21", "api_key": "test"}},
    ], **options)


def test_each_cloud_gets_its_own_wire_format(llm_backend_factory) -> None:
    gemini, bedrock, azure = (llm_backend_factory() for _ in range(3))
    router = cloud_router(gemini, bedrock, azure, num_retries=0)
    for name in ("gemini", "bedrock", "azure"):
        response = router.completion(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        assert response.usage.completion_tokens == 4
    assert gemini.requests[-1].api == "gemini.generate_content"
    assert bedrock.requests[-1].api == "bedrock.converse" and bedrock.requests[-1].model == CLAUDE
    assert azure.requests[-1].api == "azure.chat" and azure.requests[-1].model == "gpt-4o"


def test_a_throttled_bedrock_falls_back_to_gemini(llm_backend_factory) -> None:
    gemini, bedrock, azure = (llm_backend_factory() for _ in range(3))
    bedrock.add_fault("rate_limit")  # every Converse call: ThrottlingException
    router = cloud_router(gemini, bedrock, azure, fallbacks=[{"bedrock": ["gemini"]}], num_retries=0)
    response = router.completion(model="bedrock", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert response.usage.completion_tokens == 4
    assert [record.status for record in bedrock.requests] == [429]
    assert bedrock.requests[0].api == "bedrock.converse"
    gemini.assert_requests(1, status=200)
    assert azure.requests == []
