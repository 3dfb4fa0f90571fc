"""The names of ``vllm serve``'s flags and llm-d-inference-sim's that shape nothing a simulator has.

The reference is vLLM 0.12.0's ``vllm serve --help`` (``docs.vllm.ai/en/v0.12.0/cli/serve/``) and
llm-d-inference-sim's README of the same season. ``llmsim serve`` accepts each of these (a value flag
with its value, a switch with or without vLLM's ``--no-`` form) and lists the ones it was given in one
warning line; a flag in neither table nor among its own is refused by name. The flags that do shape a
simulator (``--max-num-seqs``, ``--served-model-name``, ``--time-to-first-token``, ...) are in
:mod:`.vllm_arguments`, or are settings' own names and aliases (:mod:`pytest_llmsim.sim.config`).
"""

from __future__ import annotations

__all__ = ["SHORT_WITHOUT_EFFECT_SWITCHES", "SHORT_WITHOUT_EFFECT_VALUES", "VLLM_RELEASE", "WITHOUT_EFFECT_SWITCHES",
           "WITHOUT_EFFECT_VALUES"]

VLLM_RELEASE = "0.12.0"

#: Flags that take a value: the model's files, the GPU's memory and parallelism, kernels, the frontend's
#: HTTP details, observability backends.
WITHOUT_EFFECT_VALUES: frozenset[str] = frozenset("""
    additional-config all2all-backend allowed-headers allowed-local-media-path allowed-media-domains
    allowed-methods allowed-origins api-server-count chat-template chat-template-content-format code-revision
    collect-detailed-traces compilation-config config-format convert cpu-offload-gb cuda-graph-sizes
    data-parallel-address data-parallel-backend data-parallel-rank data-parallel-rpc-port data-parallel-size
    data-parallel-size-local data-parallel-start-rank decode-context-parallel-size default-mm-loras
    distributed-executor-backend download-dir dtype ec-transfer-config eplb-config expert-placement-strategy
    generation-config guided-decoding-backend h11-max-header-count h11-max-incomplete-event-size hf-config-path
    hf-overrides hf-token ignore-patterns io-processor-plugin kv-cache-dtype kv-cache-memory-bytes
    kv-events-config kv-offloading-backend kv-offloading-size kv-transfer-config limit-mm-per-prompt
    load-format log-config-file logits-processor-pattern logits-processors logprobs-mode
    long-prefill-token-threshold lora-dtype lora-extra-vocab-size mamba-cache-dtype mamba-ssm-cache-dtype
    max-cpu-loras max-log-len max-logprobs max-long-partial-prefills max-lora-rank max-num-partial-prefills
    max-parallel-loading-workers media-io-kwargs middleware mm-encoder-tp-mode mm-processor-cache-gb
    mm-processor-cache-type mm-processor-kwargs mm-shm-cache-max-object-size-mb model-impl
    model-loader-extra-config otlp-traces-endpoint override-attention-dtype override-generation-config
    pipeline-parallel-size pooler-config prefix-caching-hash-algo pt-load-map-location quantization
    reasoning-parser reasoning-parser-plugin response-role revision root-path rope-scaling rope-theta runner
    safetensors-load-strategy scheduler-cls scheduling-policy show-hidden-metrics-for-version
    speculative-config ssl-ca-certs ssl-cert-reqs ssl-certfile ssl-keyfile stream-interval
    structured-outputs-config swap-space task tensor-parallel-size tokenizer tokenizer-mode
    tokenizer-revision tool-call-parser tool-parser-plugin tool-server uds video-pruning-rate worker-cls
    worker-extension-cls gpu-memory-utilization
    dataset-path dataset-url event-batch-size hash-seed kv-cache-transfer-latency
    kv-cache-transfer-latency-std-dev kv-cache-transfer-time-per-token kv-cache-transfer-time-std-dev
    max-tool-call-array-param-length max-tool-call-integer-param max-tool-call-number-param
    min-tool-call-array-param-length min-tool-call-integer-param min-tool-call-number-param
    object-tool-call-not-required-field-probability prefill-overhead prefill-time-std-dev
    time-factor-under-load tokenizers-cache-dir tool-call-not-required-param-probability zmq-endpoint
    zmq-max-connect-attempts fake-metrics
""".split())

#: Switches: each may be given as ``--NAME`` or ``--no-NAME``.
WITHOUT_EFFECT_SWITCHES: frozenset[str] = frozenset("""
    aggregate-engine-logging allow-credentials async-scheduling calculate-kv-scales data-parallel-external-lb
    data-parallel-hybrid-lb disable-cascade-attn disable-chunked-mm-input disable-custom-all-reduce
    disable-fastapi-docs disable-frontend-multiprocessing disable-hybrid-kv-cache-manager disable-log-requests
    disable-log-stats disable-mm-preprocessor-cache disable-sliding-window disable-uvicorn-access-log
    enable-auto-tool-choice enable-dbo enable-eplb enable-expert-parallel
    enable-force-include-usage enable-log-outputs enable-log-requests enable-lora-bias enable-prompt-embeds
    enable-prompt-tokens-details enable-request-id-headers enable-server-load-tracking enable-sleep-mode
    enable-ssl-refresh enable-tokenizer-info-endpoint enforce-eager exclude-tools-when-tool-choice-none
    fully-sharded-loras headless interleave-mm-strings kv-sharing-fast-prefill log-error-stack
    ray-workers-use-nsight return-tokens-as-token-ids skip-mm-profiling skip-tokenizer-init tokens-only
    trust-remote-code trust-request-chat-template use-tqdm-on-load
    dataset-in-memory enable-kvcache self-signed-certs
""".split())

#: Their short forms (``-tp 2``): value flags, and ``-ep`` (expert parallelism), a switch.
SHORT_WITHOUT_EFFECT_VALUES: frozenset[str] = frozenset(
    "-tp -pp -dp -dpn -dpr -dpl -dpa -dpp -dpb -asc -dcp -O".split())
SHORT_WITHOUT_EFFECT_SWITCHES: frozenset[str] = frozenset({"-ep"})
