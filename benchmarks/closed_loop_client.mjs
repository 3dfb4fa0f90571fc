// Closed-loop streaming client (its own process): CONCURRENCY workers, each sending its next
// request as soon as one ends. Distinct prompts of PROMPT_TOKENS token ids (no prefix-cache hits,
// like vllm bench serve's random prompts), MAX_TOKENS generated, streamed completions. Prints JSON:
// time to first token and inter-chunk gaps (seconds), completed requests and the measuring window.
// Two ways to count:
// - NUM_PROMPTS absent or 0: for SECONDS; each worker's first request warms up and is not measured
//   with the rest: its TTFT is reported apart, as firstTtfts (the first wave, CONCURRENCY requests sent at
//   one instant, is what an outside client that measures from its first send also counts).
// - NUM_PROMPTS > 0: as `vllm bench serve --max-concurrency` and guidellm count, exactly NUM_PROMPTS
//   requests from a cold start, every one measured, the window from the first send to the last
//   answer (SECONDS is then ignored).
// Usage: node closed_loop_client.mjs ROOT_URL CONCURRENCY SECONDS PROMPT_TOKENS MAX_TOKENS [SEED [NUM_PROMPTS]]
// (prompts are pseudo-random token ids from SEED: runs with different seeds share no prefix)
import http from "node:http";

import { streamArrivals } from "./sse_request.mjs";

const [root, concurrency, seconds, promptTokens, maxTokens] = [
  process.argv[2], Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5]),
  Number(process.argv[6])];
const seed = Number(process.argv[7] || 1);
const numPrompts = Number(process.argv[8] || 0);
const target = new URL("/v1/completions", root);
// Idle sockets are dropped after 4 s, before the server's 5 s keep-alive timeout closes them: as a
// gateway sets its pool's idle expiry below its upstream's, lest it reuse a socket the server is closing.
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, timeout: 4000 });
let counter = 0;

function oneRequest() {
  const k = counter++;
  let x = (seed * 2654435761 + k * 40503 + 1) % 2147483648;
  const prompt = Array.from({ length: promptTokens }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;  // an LCG: distinct prompts, no shared prefix
    return 1000 + (x % 90000);
  });
  const body = JSON.stringify({ model: "llmsim", prompt, max_tokens: maxTokens, stream: true });
  return streamArrivals(target, agent, body, (event) => event.choices && event.choices[0] && event.choices[0].text);
}

const ttfts = [], gaps = [], firstTtfts = [];
let completed = 0, windowStart = null, windowEnd = 0;

function measure(arrivals) {
  if (arrivals.length) ttfts.push(arrivals[0]);
  for (let i = 1; i < arrivals.length; i++) gaps.push(arrivals[i] - arrivals[i - 1]);
  completed++;
  windowEnd = Date.now();
}

async function timedWorker() {
  const deadline = Date.now() + seconds * 1000;
  let first = true;
  while (Date.now() < deadline) {
    const arrivals = await oneRequest();
    if (first) {
      first = false;
      if (arrivals.length) firstTtfts.push(arrivals[0]);
      if (windowStart === null || Date.now() > windowStart) windowStart = Date.now();
      continue;
    }
    measure(arrivals);
  }
}

let issued = 0;
async function countedWorker() {
  while (issued < numPrompts) {
    issued++;
    measure(await oneRequest());
  }
}

if (numPrompts > 0) windowStart = Date.now();
await Promise.all(Array.from({ length: concurrency }, numPrompts > 0 ? countedWorker : timedWorker));
process.stdout.write(JSON.stringify({ ttfts, gaps, firstTtfts, completed, window: (windowEnd - windowStart) / 1000 }));
agent.destroy();
