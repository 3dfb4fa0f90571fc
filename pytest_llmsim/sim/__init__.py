"""The protocol-blind side of the simulator: what every wire API hands it and gets back.

An API adapter (:mod:`pytest_llmsim.api`) turns a JSON body into a
:class:`GenerationRequest` and renders a :class:`SimError` in its own error
shape; nothing here knows which API a request came through.
"""

from .conversations import ConversationStore, StoredExchange
from .request import ChatMessage, GenerationRequest, RateLimitStatus, SimError, invalid

__all__ = ["ChatMessage", "ConversationStore", "GenerationRequest", "RateLimitStatus", "SimError", "StoredExchange",
           "invalid"]
