// Streaming load client for the timing-fidelity benchmark (runs in its own process).
// Opens N streams at once and records when each content event arrives.
// Usage: node stream_client.mjs ROOT_URL STREAMS MAX_TOKENS
//   [chat|messages|responses|gemini|gemini-array|bedrock|azure|vertex-claude|cohere|ollama]
import http from "node:http";

import { streamArrivals } from "./sse_request.mjs";

const [root, streams, maxTokens] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const api = process.argv[5] || "chat";
const prompt = "Tell me a story.";
// Per API: its path, its request body, and whether a parsed event carries generated text.
const APIS = {
  chat: ["/v1/chat/completions", { model: "llmsim", max_tokens: maxTokens, stream: true,
                                   messages: [{ role: "user", content: prompt }] },
         (e) => e.choices && e.choices[0] && e.choices[0].delta && e.choices[0].delta.content],
  messages: ["/v1/messages", { model: "llmsim", max_tokens: maxTokens, stream: true,
                               messages: [{ role: "user", content: prompt }] },
             (e) => e.type === "content_block_delta" && e.delta.text],
  responses: ["/v1/responses", { model: "llmsim", max_output_tokens: maxTokens, stream: true, input: prompt },
              (e) => e.type === "response.output_text.delta" && e.delta],
  gemini: ["/v1beta/models/llmsim:streamGenerateContent?alt=sse", geminiBody(), geminiText],
  "gemini-array": ["/v1beta/models/llmsim:streamGenerateContent", geminiBody(), geminiText, "json-array"],
  bedrock: ["/model/llmsim/converse-stream", { messages: [{ role: "user", content: [{ text: prompt }] }],
                                               inferenceConfig: { maxTokens: maxTokens } },
            (e) => e.contentBlockDelta && e.contentBlockDelta.delta.text, "aws-eventstream"],
  azure: ["/openai/deployments/llmsim/chat/completions?api-version=2024-10-21",
          { max_tokens: maxTokens, stream: true, messages: [{ role: "user", content: prompt }] },
          (e) => e.choices && e.choices[0] && e.choices[0].delta && e.choices[0].delta.content],
  ollama: ["/api/chat", { model: "llmsim", stream: true, options: { num_predict: maxTokens },
                         messages: [{ role: "user", content: prompt }] },
           (e) => !e.done && e.message && e.message.content, "json-array"],
  cohere: ["/v2/chat", { model: "llmsim", max_tokens: maxTokens, stream: true,
                        messages: [{ role: "user", content: prompt }] },
           (e) => e.type === "content-delta" && e.delta.message.content.text],
  "vertex-claude": ["/v1/projects/p/locations/us-east5/publishers/anthropic/models/llmsim:streamRawPredict",
                    { anthropic_version: "vertex-2023-10-16", max_tokens: maxTokens,
                      messages: [{ role: "user", content: prompt }] },
                    (e) => e.type === "content_block_delta" && e.delta.text],
};
function geminiBody() {
  return { contents: [{ role: "user", parts: [{ text: prompt }] }], generationConfig: { maxOutputTokens: maxTokens } };
}
function geminiText(e) {
  const parts = e.candidates && e.candidates[0] && e.candidates[0].content && e.candidates[0].content.parts;
  return parts && parts.some((p) => p.text);
}
const [path, request, hasText, framing] = APIS[api];
const target = new URL(path, root);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const body = JSON.stringify(request);

function oneStream() {
  return streamArrivals(target, agent, body, hasText, framing);
}

const results = await Promise.all(Array.from({ length: streams }, (_, i) => oneStream(i)));
process.stdout.write(JSON.stringify(results));
