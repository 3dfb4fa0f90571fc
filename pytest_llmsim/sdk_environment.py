"""The official SDKs' environment variables, pointed at a backend: code that builds its own clients runs unchanged.

Each SDK reads its own names and URL forms (``OPENAI_BASE_URL`` ends in ``/v1``; the others are the
server's root and add their paths themselves). What a handle's ``env()`` returns and the
``llm_backend_env`` fixture sets. Two SDKs read theirs early: cohere's clients take ``CO_API_URL`` as a
default argument, evaluated when ``cohere`` is first imported, and ollama's module-level functions
(``ollama.chat``) use a client made when ``ollama`` is imported; a client made afterwards
(``ollama.Client()``) reads ``OLLAMA_HOST`` then.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["AZURE_API_VERSION", "DEFAULT_KEY", "environment_set", "sdk_environment"]

DEFAULT_KEY = "llmsim-test-key"
# An Azure OpenAI data-plane version the backend serves (any published one is; this is the GA of 2024-10).
AZURE_API_VERSION = "2024-10-21"


def sdk_environment(root_url: str, api_key: str = DEFAULT_KEY) -> dict[str, str]:
    """The variables that send every official SDK to the backend at ``root_url`` (``http://HOST:PORT``)
    with ``api_key``: OpenAI, Azure OpenAI, Anthropic, google-genai (Gemini and Vertex AI), boto3's
    Bedrock runtime (a region and credentials of its own: any access key is accepted unless the backend
    requires one), Cohere and Ollama."""
    return {
        "OPENAI_BASE_URL": f"{root_url}/v1",
        "OPENAI_API_KEY": api_key,
        "AZURE_OPENAI_ENDPOINT": root_url,
        "AZURE_OPENAI_API_KEY": api_key,
        "OPENAI_API_VERSION": AZURE_API_VERSION,
        "ANTHROPIC_BASE_URL": root_url,
        "ANTHROPIC_API_KEY": api_key,
        "GOOGLE_GEMINI_BASE_URL": root_url,
        "GOOGLE_VERTEX_BASE_URL": root_url,
        "GEMINI_API_KEY": api_key,
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": root_url,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": api_key,
        "AWS_SECRET_ACCESS_KEY": "llmsim-test-secret",
        "CO_API_URL": root_url,
        "CO_API_KEY": api_key,
        "OLLAMA_HOST": root_url,
    }


@contextlib.contextmanager
def environment_set(variables: Mapping[str, str]) -> Iterator[Mapping[str, str]]:
    """``variables`` in ``os.environ`` while the block runs; what each was before (or its absence) after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield variables
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
