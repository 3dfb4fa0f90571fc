"""Wire protocols: one module per API, each a :class:`~pytest_llmsim.api.base.WireAPI`.

``openai_chat`` (``POST /v1/chat/completions``) and ``openai_completions``
(``POST /v1/completions``) share ``openai_common``; ``openai_responses``
serves ``POST /v1/responses``, ``anthropic_messages`` ``POST /v1/messages``,
``openai_embeddings`` ``POST /v1/embeddings``; ``vllm_extras`` reads the
bodies of vLLM's tokenize and LoRA routes; ``tool_fields`` the tool and
structured-output fields of every API; ``validation`` holds the checks every
parser uses.
"""

from .anthropic_messages import ANTHROPIC_MESSAGES
from .base import StreamRenderer, WireAPI
from .openai_chat import OPENAI_CHAT
from .openai_common import openai_error_body
from .openai_completions import OPENAI_COMPLETIONS
from .openai_embeddings import OPENAI_EMBEDDINGS
from .openai_responses import OPENAI_RESPONSES

__all__ = ["ANTHROPIC_MESSAGES", "OPENAI_CHAT", "OPENAI_COMPLETIONS", "OPENAI_EMBEDDINGS", "OPENAI_RESPONSES",
           "StreamRenderer", "WireAPI", "openai_error_body"]
