// One streamed POST for the benchmark clients: when (seconds after the request was written) each
// SSE event carrying generated text arrived. The clock starts when the request has been handed to
// the OS (socket connected, body written): the client's own event-loop lag is not the server's.
import http from "node:http";

// framing "sse" (data: events) or "json-array" (Gemini's streamGenerateContent without alt=sse: one
// JSON array, an element per line).
export function streamArrivals(target, agent, body, hasText, framing = "sse") {
  return new Promise((resolve, reject) => {
    const arrivals = [];
    let sent = process.hrtime.bigint();
    const req = http.request({
      host: target.hostname, port: target.port, path: target.pathname + target.search, method: "POST", agent,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    }, (res) => {
      let buffer = "";
      res.setEncoding("utf8");
      res.on("data", (data) => {
        const now = process.hrtime.bigint();
        buffer += data.replace(/\r/g, "");
        let cut;
        if (framing === "json-array") {
          while ((cut = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, cut).replace(/^[[,]/, "");
            buffer = buffer.slice(cut + 1);
            if (line.startsWith("{") && hasText(JSON.parse(line))) arrivals.push(Number(now - sent) / 1e9);
          }
          return;
        }
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const line = event.split("\n").find((l) => l.startsWith("data: {"));
          if (line && hasText(JSON.parse(line.slice(6)))) arrivals.push(Number(now - sent) / 1e9);
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
