#!/usr/bin/env bash
# Run the image as a user would and reach it with the OpenAI SDK on loopback: the entrypoint with vLLM's
# arguments, the health check, a completion and a stream (with the pod's identity header), /metrics. Prints the
# cold start: from starting the container to the first answered request.
#
#   deploy/image/smoke.sh [TAG]     default tag: localhost/pytest-llmsim:VERSION
#   PYTHON=...                      a Python with the openai package (default: python3)
#
# With a Docker engine: `docker run`. Without one: `buildah run --isolation chroot` (the host's network, so the
# container serves on a loopback port of this machine; podman's runtime cannot set its limits in some sandboxes).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
tag="${1:-localhost/pytest-llmsim:$version}"
python="${PYTHON:-python3}"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
model="Qwen/Qwen2.5-0.5B-Instruct"
arguments=("$model" --max-num-seqs 4 --max-model-len 8k --dtype auto --gpu-memory-utilization 0.9)

started=$("$python" -c 'import time; print(time.monotonic())')
runner=""
if command -v docker > /dev/null && docker info > /dev/null 2>&1; then
    container=$(docker run --detach --rm -p "127.0.0.1:$port:8000" -e POD_NAME=smoke-0 "$tag" "${arguments[@]}")
    trap 'docker stop --time 5 "$container" > /dev/null || true' EXIT
    health() { docker exec "$container" sh -c 'exec "$@"' sh "${check[@]}"; }
else
    container=$(buildah from --quiet "$tag")
    # buildah run does not apply the entrypoint: run the image's own, listening on the free port
    mapfile -t entrypoint < <(buildah inspect --format '{{range .Docker.Config.Entrypoint}}{{println .}}{{end}}' "$tag" | sed '/^$/d')
    setsid buildah run --isolation chroot --env POD_NAME=smoke-0 "$container" -- \
        "${entrypoint[@]}" "${arguments[@]}" --port "$port" > /tmp/llmsim-smoke.log 2>&1 &
    runner=$!
    stop() { set +e; kill -TERM -- "-$runner" 2> /dev/null; wait "$runner" 2> /dev/null; buildah rm "$container" > /dev/null; }
    trap stop EXIT
    health() { buildah run --isolation chroot --env "LLMSIM_HEALTH_PORT=$port" "$container" -- "${check[@]}"; }
fi
mapfile -t check < <(buildah inspect --format '{{range .Docker.Config.Healthcheck.Test}}{{println .}}{{end}}' "$tag" 2> /dev/null | sed '/^$/d' | tail -n +2 || true)

"$python" - "$port" "$model" "$started" "$runner" <<'PYTHON'
import os
import sys
import time

import httpx
import openai

port, model, started, runner = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=10)
deadline = started + 60
while True:
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5)
        break
    except openai.APIConnectionError:
        if runner and not os.path.exists(f"/proc/{runner}"):
            raise SystemExit("the container stopped: " + open("/tmp/llmsim-smoke.log").read()[-2000:]) from None
        if time.monotonic() > deadline:
            raise SystemExit("the container did not answer within 60 s")
        time.sleep(0.02)
print(f"cold start to a served request: {time.monotonic() - started:.2f} s")
assert raw.headers["x-inference-pod"] == "smoke-0", raw.headers
completion = raw.parse()
assert completion.model == model and completion.usage is not None and completion.usage.completion_tokens == 5
chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=4, stream=True))
assert sum(1 for chunk in chunks if chunk.choices and chunk.choices[0].delta.content) == 4
metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
assert 'vllm:num_requests_running{engine="0",model_name="' + model + '"}' in metrics, metrics[:500]
assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["max_model_len"] == 8000
print("the SDK's completion and stream, the pod header, /metrics and vLLM's arguments: ok")
PYTHON
if [ ${#check[@]} -gt 0 ]; then
    health && echo "the image's health check: ok"
fi
