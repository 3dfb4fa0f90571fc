// Streaming load client for the timing-fidelity benchmark (runs in its own process).
// Opens N streams at once and records when each content event arrives.
// Usage: node stream_client.mjs ROOT_URL STREAMS MAX_TOKENS [chat|messages|responses]
import http from "node:http";

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
};
const [path, request, hasText] = APIS[api];
const target = new URL(path, root);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const body = JSON.stringify(request);

function oneStream(index) {
  return new Promise((resolve, reject) => {
    const arrivals = [];
    // The clock starts when the request has been handed to the OS (socket
    // connected, body written): the client's own event-loop lag is not the server's.
    let sent = process.hrtime.bigint();
    const req = http.request({
      host: target.hostname, port: target.port, path: target.pathname, method: "POST", agent,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    }, (res) => {
      let buffer = "";
      res.setEncoding("utf8");
      res.on("data", (data) => {
        const now = process.hrtime.bigint();
        buffer += data;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = event.split("\n").find((line) => line.startsWith("data: {"));
          if (data && hasText(JSON.parse(data.slice(6)))) arrivals.push(Number(now - sent) / 1e9);
        }
      });
      res.on("end", () => resolve(arrivals));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.on("finish", () => { sent = process.hrtime.bigint(); });
    req.end(body);
  });
}

const results = await Promise.all(Array.from({ length: streams }, (_, i) => oneStream(i)));
process.stdout.write(JSON.stringify(results));
