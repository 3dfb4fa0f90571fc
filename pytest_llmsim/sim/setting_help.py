"""One line of help per setting, as the CLI's ``--help`` shows it.

Kept apart from :mod:`.config` (the settings and their validation); ``test_config`` holds the two to the
same names.
"""

from __future__ import annotations

__all__ = ["SETTING_HELP"]

SETTING_HELP: dict[str, str] = {
    "model": "Model name the backend serves and reports",
    "profile": "A preset of settings (e.g. qwen2.5-0.5b-l4: step costs fitted to a real vLLM sweep) or a "
               ".toml file; settings given beside it win",
    "ttft": "Base time to first token, simulated seconds",
    "itl": "Inter-token latency (one decode step), simulated seconds",
    "prefill_per_token": "Prefill cost per uncached prompt token, simulated seconds",
    "jitter": "Relative standard deviation of seeded latency noise (0 to 1)",
    "load_factor": "Step-time multiplier when the batch is full (>= 1)",
    "scheduler": "sequence (each sequence keeps its own step clock: ttft, itl, load_factor) or step (one step "
                 "clock for the batch, costs by composition: step_* settings)",
    "step_base": "step mode: fixed cost of every step, simulated seconds",
    "step_per_prefill_token": "step mode: cost per prefill token in a step, simulated seconds",
    "step_per_decode_seq": "step mode: cost per decoding sequence in a step, simulated seconds",
    "step_per_kv_token": "step mode: cost per context token the step's decodes attend, simulated seconds",
    "step_compute_per_token": "step mode: compute time per token in the step (prefill and decode alike); the step "
                              "takes the larger of this compute and its memory time (the roofline), simulated "
                              "seconds",
    "step_expert_weights": "step mode, a mixture of experts: time to read every routed expert's weights once; a "
                           "step reads the share its tokens route to (memory time), simulated seconds",
    "expert_share_per_token": "step mode, a mixture of experts: the share of routed experts one token uses "
                              "(experts per token / routed experts); a step of T tokens reads 1 - (1 - share)^T "
                              "of step_expert_weights",
    "step_prefill_base": "step mode: extra fixed cost of a step with a prefill chunk in it (vLLM replays a captured "
                         "CUDA graph only for decode-only steps), simulated seconds",
    "max_num_batched_tokens": "step mode: token budget of one step (a decode counts one; prefill is chunked to fit)",
    "request_overhead": "step mode: the API server's own time before a request reaches the scheduler, seconds",
    "request_serial": "step mode: API-server time each request takes in turn (one event loop), so requests sent "
                      "together reach the scheduler one after another, seconds",
    "max_batch_size": "Sequences decoded concurrently",
    "max_waiting": "Waiting-queue capacity in sequences; a full queue answers 503, a request with more sequences "
                   "than max_batch_size + max_waiting 400",
    "max_model_len": "Context length: prompt plus max_tokens",
    "block_size": "Prefix-cache block size in tokens",
    "cache_capacity_blocks": "Prefix-cache capacity in blocks (LRU eviction)",
    "cache_hit_rate": "Force this fraction of prompt tokens to be cached",
    "kv_cache_blocks": "KV-cache capacity in blocks of block_size tokens: a sequence waits for room for its "
                       "prompt, and a full cache preempts the latest admitted sequence; unset means unbounded",
    "output": "Generated content: filler (seeded) or echo (last user message)",
    "answer_length": "Answer length in tokens: N or MIN-MAX (seeded); unset runs to max_tokens",
    "default_max_tokens": "max_tokens when a request gives none",
    "seed": "Seed for content, jitter, sampled answer lengths and fault selection",
    "speed": "Simulated seconds per wall second (a positive number or inf)",
    "rpm": "Simulated requests-per-minute limit (429 past it); unset means none",
    "tpm": "Simulated tokens-per-minute limit (prompt + max_tokens); unset means none",
    "max_log_entries": "Requests kept in the request log (oldest dropped)",
    "max_log_bytes": "Bytes of bodies and headers kept in the request log (oldest dropped)",
    "max_log_body_bytes": "Larger bodies are logged as their first this many bytes plus a marker",
    "max_body_bytes": "Largest request body accepted; larger answers 413",
    "max_request_tokens": "Most tokens one request may ask for: prompt tokens plus n x max_tokens "
                          "over all its prompts (x (1 + top_logprobs) with logprobs); more answers 400",
    "max_response_bytes": "Largest non-streamed answer body a request may ask for (estimated from n, max_tokens "
                          "and logprobs before any work); more answers 400",
    "keepalive_timeout": "Wall seconds a connection may take to send a request head (the first, or the next on a "
                         "kept-alive connection) before it is closed, and to send its body after the head (408)",
    "keepalive": "Keep HTTP/1.1 connections open between requests (false: Connection: close on every answer)",
    "keepalive_max_requests": "Close a kept-alive connection after this many requests, without telling the "
                              "client first; unset means no limit",
    "max_stored_responses": "Responses API answers kept for previous_response_id and retrieval (oldest dropped)",
    "max_stored_response_bytes": "Bytes of text those stored answers may hold in all, their conversations "
                                 "included (oldest dropped; the newest always kept)",
    "max_stored_files": "Files kept by /v1/files (batch inputs); an upload past it answers 400 file_storage_full",
    "max_stored_file_bytes": "Bytes those files may hold in all; an upload past it answers 400 file_storage_full",
    "max_trace_requests": "Requests the backend's trace keeps (oldest dropped first); 0 turns recording off",
    "max_queued_replies": "Scripted replies that may wait in the queue (reply_with); more raise / answer 400",
    "max_rules": "Rules a backend may hold (on(), add_rule); more raise / answer 400",
    "max_script_bytes": "Bytes of JSON the queued replies and rules may take in all; more raise / answer 400",
    "tool_call_rate": "Under tool_choice auto, the seeded chance that a reply calls a tool (0 to 1)",
    "tool_calls_per_reply": "Tool calls in a reply that calls tools (1 when the request disables parallel calls)",
    "embedding_size": "Length of /v1/embeddings vectors (a request's 'dimensions' may shorten them)",
    "served_models": "More model names the backend answers to, besides 'model' (comma-separated)",
    "strict_models": "Answer 404 model_not_found for a model name the backend does not serve",
    "model_limits": "Context window and largest max_tokens per model name, over the catalog of published "
                    "limits: {name: (context_window, max_output_tokens)} or 'name=CONTEXT/MAX_OUTPUT,...'",
    "optional_property_rate": "The seeded chance that generated JSON (tool arguments, structured output) fills in "
                              "each optional property (0 to 1), as a model fills in what it can",
    "api_keys": "Keys generation requests may present (a list, or key -> {rpm, tpm} of its own): any other is a "
                "401 in the API's shape; a key over its own limits answers 429 while the others are served",
    "tls": "Serve HTTPS (a certificate made on first use; clients trust llm_backend.ca_file): URLs say https, "
           "and a plain HTTP request other than the control API's is a 400",
    "compression": "Compress JSON answers, errors and streams (each event flushed) when the request's "
                   "Accept-Encoding allows: 'off' (the default, as vLLM), 'gzip', or 'br' (the brotli extra)",
    "strict_fields": "Refuse a request field no version of its API defines (400, as the provider does) instead "
                     "of accepting it and listing it in record.ignored_fields",
    "natural_answer_cap": "With no answer_length, an answer whose max_tokens is larger than this ends naturally "
                          "(finish stop) at a seeded length of at most this; 0: answers run to max_tokens",
    "ollama_load_seconds": "Simulated seconds a model takes to load through Ollama's API (/api/*): added to its "
                           "first request and to the first after its keep_alive ran out; reported as load_duration",
    "required_api_key": "Generation requests must carry this credential (an API key or bearer token, or a SigV4 "
                        "access key id): otherwise 401 (403 for a signed request), in the API's shape",
    "lora_adapters": "LoRA adapters loaded at start (comma-separated names), served like models",
    "max_loras": "LoRA adapters active in one batch; requests for others wait",
}
