// Streaming load client for the timing-fidelity benchmark (runs in its own process).
// Opens N chat-completion streams at once and records when each content chunk arrives.
// Usage: node stream_client.mjs URL STREAMS MAX_TOKENS
import http from "node:http";

const [url, streams, maxTokens] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const target = new URL(url);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const body = JSON.stringify({
  model: "llmsim", max_tokens: maxTokens, stream: true,
  messages: [{ role: "user", content: "Tell me a story." }],
});

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
          if (!event.startsWith("data: {")) continue;
          const chunk = JSON.parse(event.slice(6));
          const choice = chunk.choices && chunk.choices[0];
          if (choice && choice.delta && choice.delta.content) arrivals.push(Number(now - sent) / 1e9);
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
