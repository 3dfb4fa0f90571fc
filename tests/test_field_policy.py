"""No field is passed over silently: every field of the official SDKs' request types has a decision (honoured,
accepted with no effect, refused), a refused one answers 400 naming it, and a field no API defines is listed in
the record (``strict_fields`` refuses it as the provider does)."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.api.anthropic_fields import MESSAGE_FIELDS
from pytest_llmsim.api.bedrock_fields import CONVERSE_FIELDS
from pytest_llmsim.api.field_policy import FieldPolicy
from pytest_llmsim.api.gemini import GENERATE_FIELDS
from pytest_llmsim.api.gemini_fields import _CONFIG_FIELDS as GEMINI_CONFIG_FIELDS
from pytest_llmsim.api.openai_chat import CHAT_FIELDS
from pytest_llmsim.api.openai_completions import COMPLETION_FIELDS
from pytest_llmsim.api.openai_embeddings import EMBEDDING_FIELDS
from pytest_llmsim.api.openai_images import FIELDS as IMAGE_FIELDS
from pytest_llmsim.api.openai_moderations import MODERATION_FIELDS
from pytest_llmsim.api.openai_responses_fields import RESPONSE_FIELDS
from pytest_llmsim.api.openai_speech import FIELDS as SPEECH_FIELDS
from pytest_llmsim.api.openai_transcription import FIELDS as TRANSCRIPTION_FIELDS

ASK: Any = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": ASK, "max_tokens": 4}
MESSAGES = {"model": "claude-sonnet-5-5", "messages": ASK, "max_tokens": 4}
RESPONSES = {"model": "m", "input": "hi", "max_output_tokens": 4}


def _fields(typed_dict: Any) -> set[str]:
    names: set[str] = set()
    for klass in typed_dict.__mro__:
        names |= set(getattr(klass, "__annotations__", {}))
    return names


def _sdk_request_types() -> list[tuple[str, FieldPolicy, set[str]]]:
    from anthropic.types.message_create_params import MessageCreateParamsBase
    from openai.types.audio.speech_create_params import SpeechCreateParams
    from openai.types.audio.transcription_create_params import TranscriptionCreateParamsBase
    from openai.types.audio.translation_create_params import TranslationCreateParams
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase
    from openai.types.completion_create_params import CompletionCreateParamsBase as LegacyParams
    from openai.types.embedding_create_params import EmbeddingCreateParams
    from openai.types.image_create_variation_params import ImageCreateVariationParams
    from openai.types.image_edit_params import ImageEditParamsBase
    from openai.types.image_generate_params import ImageGenerateParamsBase
    from openai.types.moderation_create_params import ModerationCreateParams
    from openai.types.responses.response_create_params import ResponseCreateParamsBase

    return [("openai chat", CHAT_FIELDS, _fields(CompletionCreateParamsBase) | {"stream"}),
            ("openai completions", COMPLETION_FIELDS, _fields(LegacyParams) | {"stream"}),
            ("openai responses", RESPONSE_FIELDS, _fields(ResponseCreateParamsBase) | {"stream"}),
            ("openai embeddings", EMBEDDING_FIELDS, _fields(EmbeddingCreateParams)),
            ("openai moderations", MODERATION_FIELDS, _fields(ModerationCreateParams)),
            ("anthropic messages", MESSAGE_FIELDS, _fields(MessageCreateParamsBase) | {"stream"}),
            ("openai images", IMAGE_FIELDS, _fields(ImageGenerateParamsBase) | _fields(ImageEditParamsBase)
             | _fields(ImageCreateVariationParams) | {"stream"}),
            ("openai speech", SPEECH_FIELDS, _fields(SpeechCreateParams)),
            ("openai transcriptions", TRANSCRIPTION_FIELDS, _fields(TranscriptionCreateParamsBase) | {"stream"}),
            ("openai translations", TRANSCRIPTION_FIELDS, _fields(TranslationCreateParams))]


@pytest.mark.parametrize(("name", "policy", "fields"), _sdk_request_types(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_field_of_the_sdks_request_types_has_a_decision(name: str, policy: FieldPolicy, fields: set[str]) -> None:
    undecided = sorted(fields - policy.known)
    assert undecided == [], f"{name}: decide for each (honoured, no effect, refused) and add its row to the reference"


def test_every_field_of_bedrock_converse_and_gemini_generate_content_has_a_decision() -> None:
    import botocore.session
    from google.genai import types

    converse = set(botocore.session.get_session().get_service_model("bedrock-runtime")
                   .operation_model("Converse").input_shape.members) - {"modelId"}  # modelId is the URL's
    assert sorted(converse - set(CONVERSE_FIELDS)) == []
    sdk_side = {"http_options", "should_return_http_response", "automatic_function_calling",
                "automatic_continuation", "continuation_token"}  # the SDK acts on these; they never reach the wire

    def camel(name: str) -> str:
        return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)

    gemini = {camel(name) for name in set(types.GenerateContentConfig.model_fields) - sdk_side}
    assert sorted(gemini - set(GENERATE_FIELDS) - set(GEMINI_CONFIG_FIELDS)) == []


def test_every_decided_field_has_a_row_in_the_reference() -> None:
    from pathlib import Path

    reference = (Path(__file__).parent.parent / "docs" / "reference.md").read_text()
    for name, policy, _ in _sdk_request_types():
        section = reference.split(f"<!-- fields: {name} -->")[1].split("\n\n")[0]
        missing = sorted(f for f in policy.known if f"`{f}`" not in section)
        assert missing == [], f"{name}: fields without a row in docs/reference.md: {missing}"


@pytest.mark.parametrize(("path", "base", "field", "value"), [
    ("/v1/chat/completions", CHAT, "audio", {"voice": "alloy", "format": "wav"}),
    ("/v1/chat/completions", CHAT, "web_search_options", {}),  # an empty object still asks for web search
    ("/v1/chat/completions", CHAT, "functions", [{"name": "f"}]),
    ("/v1/completions", {"model": "m", "prompt": "hi"}, "suffix", "tail"),
    ("/v1/completions", {"model": "m", "prompt": "hi"}, "best_of", 3),
    ("/v1/responses", RESPONSES, "conversation", "conv_1"),
    ("/v1/responses", RESPONSES, "include", ["message.output_text.logprobs"]),
    ("/v1/messages", MESSAGES, "container", "container_1"),
    ("/v1/messages", MESSAGES, "mcp_servers", [{"type": "url", "url": "http://x", "name": "x"}]),
])
def test_a_refused_field_answers_400_naming_it(llm_backend: LLMBackend, path: str, base: dict[str, Any], field: str,
                                             value: Any) -> None:
    if value == {}:
        value = {"search_context_size": "low"}
    answer = httpx.post(llm_backend.url_for(path), json={**base, field: value})
    assert answer.status_code == 400
    error = answer.json()["error"]
    if path == "/v1/messages":
        assert error["type"] == "invalid_request_error" and f"'{field}'" in error["message"]
    else:
        assert error["param"] == field and error["code"] in ("unsupported_parameter", "unsupported_value")
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == field
    assert httpx.post(llm_backend.url_for(path), json=base).status_code == 200  # the server goes on


def test_a_field_no_api_defines_is_listed_and_counted(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    client.chat.completions.create(**CHAT, extra_body={"fallbacks": ["gpt-4o"], "guided_json": {}})
    assert llm_backend.requests[-1].ignored_fields == ["fallbacks", "guided_json"]
    client.chat.completions.create(**CHAT, temperature=0.2, user="u")  # defined, no effect: not listed
    assert llm_backend.requests[-1].ignored_fields == []
    assert re.search(r"^llmsim:ignored_fields_total\{[^}]*\} 2\.0$", httpx.get(llm_backend.url_for("/metrics")).text,
                     re.M)
    client.close()


def test_strict_fields_refuses_them_as_each_provider_does(llm_backend: LLMBackend) -> None:
    llm_backend.configure(strict_fields=True)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**CHAT, extra_body={"fallbacks": ["gpt-4o"]})
    assert refused.value.param == "fallbacks"
    assert "Unrecognized request argument supplied: fallbacks" in refused.value.message
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as rejected:
        claude.messages.create(**MESSAGES, extra_body={"multi_agent": True})
    assert isinstance(rejected.value.body, dict)
    assert rejected.value.body["error"]["message"] == "multi_agent: Extra inputs are not permitted"
    assert client.chat.completions.create(**CHAT).choices  # defined fields pass
    client.close()
    claude.close()
