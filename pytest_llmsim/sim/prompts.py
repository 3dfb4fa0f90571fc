"""A request's prompt as the engine counts it: token ids per prompt, with the stored conversation it continues
and the context edits it asks for applied first."""

from __future__ import annotations

from collections.abc import Callable

from .context_edits import apply_edits
from .conversations import ConversationStore, continued_not_found
from .request import GenerationRequest, invalid
from .tokens import Tokenizer

__all__ = ["continue_conversation", "prompt_ids"]


def continue_conversation(request: GenerationRequest, conversations: ConversationStore,
                          count_prompt: Callable[[], int]) -> None:
    """Put the stored conversation a request continues in front of its own messages; then apply the context
    edits it asks for (:mod:`.context_edits`), the prompt counted (``count_prompt``) as the engine will count it."""
    if request.previous_id is not None:
        stored = conversations.get(request.previous_id, request.credential)
        if stored is None:
            raise continued_not_found(request.previous_param, request.previous_id)
        own = request.preamble
        request.messages = [*request.messages[:own], *stored.messages, *request.messages[own:]]
        if request.cache_continued:  # the stored messages are the request's cached prefix
            request.cache_breakpoint = own + len(stored.messages)
        request.previous_id = None  # resolved: a retry of start() must not prepend it twice
    if request.context_edits and request.unedited_prompt_tokens is None:  # once: start() may be retried
        request.unedited_prompt_tokens, request.applied_edits = apply_edits(request.messages, request.context_edits,
                                                                            count_prompt)


def prompt_ids(request: GenerationRequest, tokenizer: Tokenizer,
               echo_output: bool) -> tuple[list[list[int]], list[str]]:
    """Each prompt's token ids, and the text an echo of it shows (a chat: the last user message; a token-id
    prompt's text only where an answer shows it, ``request.echo`` or ``echo_output``)."""
    if request.kind == "chat":
        ids = tokenizer.chat_prompt(request.messages, request.tools_text)
        users = [m.content for m in request.messages if m.role == "user"]
        return [ids], [users[-1] if users else request.messages[-1].content]
    prompts: list[list[int]] = []
    sources: list[str] = []
    if request.prompt_defaulted:  # the document separator, one special token
        eot = tokenizer.encoding.eot_token
        return [[eot]], [tokenizer.encoding.decode([eot])]
    # a token-id prompt's text only where an answer shows it (~10 us for 256 ids, on every random-dataset request)
    shown = request.echo or echo_output
    for i, prompt in enumerate(request.prompts):
        if isinstance(prompt, str):
            prompts.append(tokenizer.encode(prompt))
            sources.append(prompt)
        else:
            bad = tokenizer.first_invalid_id(prompt)
            if bad is not None:
                raise invalid(f"Invalid 'prompt[{i}]': token id {bad} is not a token of this model's "
                              f"vocabulary ({tokenizer.name}).", "prompt", "invalid_value")
            prompts.append(list(prompt))
            sources.append(tokenizer.encoding.decode(prompt) if shown else "")
    return prompts, sources
