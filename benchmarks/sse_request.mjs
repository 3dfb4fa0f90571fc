// One streamed POST for the benchmark clients: when (seconds after the request was written) each
// SSE event carrying generated text arrived. The clock starts when the request has been handed to
// the OS (socket connected, body written): the client's own event-loop lag is not the server's.
import http from "node:http";

// AWS event-stream headers: the :event-type of one message (name length, name, type 7, value length, value).
function awsEventType(headers) {
  let at = 0;
  while (at < headers.length) {
    const nameLength = headers[at];
    const name = headers.subarray(at + 1, at + 1 + nameLength).toString();
    const valueLength = headers.readUInt16BE(at + 2 + nameLength);
    const value = headers.subarray(at + 4 + nameLength, at + 4 + nameLength + valueLength).toString();
    if (name === ":event-type") return value;
    at += 4 + nameLength + valueLength;
  }
  return null;
}

// framing "sse" (data: events), "aws-eventstream" (Bedrock's binary frames) or "json-array" (an object per
// line: Gemini's JSON array without alt=sse, and Ollama's NDJSON) (Gemini's streamGenerateContent without alt=sse: one
// JSON array, an element per line).
export function streamArrivals(target, agent, body, hasText, framing = "sse") {
  return new Promise((resolve, reject) => {
    const arrivals = [];
    let sent = process.hrtime.bigint();
    const req = http.request({
      host: target.hostname, port: target.port, path: target.pathname + target.search, method: "POST", agent,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    }, (res) => {
      if (framing === "aws-eventstream") {
        let pending = Buffer.alloc(0);
        res.on("data", (data) => {
          const now = process.hrtime.bigint();
          pending = Buffer.concat([pending, data]);
          while (pending.length >= 12 && pending.length >= pending.readUInt32BE(0)) {
            const total = pending.readUInt32BE(0);
            const headersLength = pending.readUInt32BE(4);
            const event = awsEventType(pending.subarray(12, 12 + headersLength));
            const payload = pending.subarray(12 + headersLength, total - 4).toString("utf8");
            pending = pending.subarray(total);
            if (event && hasText({ [event]: JSON.parse(payload) })) arrivals.push(Number(now - sent) / 1e9);
          }
        });
        res.on("end", () => resolve(arrivals));
        res.on("error", reject);
        return;
      }
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
