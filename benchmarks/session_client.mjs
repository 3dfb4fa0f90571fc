// Session load client for the session timing benchmark (runs in its own process; node --experimental-websocket).
// Opens N Realtime sessions and configures each (text output, one user message); once every session is ready,
// each asks for one text response of MAX_TOKENS tokens at the same moment, and records when each
// response.output_text.delta arrives, in seconds after its response.create was sent.
// Usage: node --experimental-websocket session_client.mjs WS_ROOT_URL SESSIONS MAX_TOKENS
// The WebSocket is the ws package's where `npm ci --prefix benchmarks` installed it (at 256 sessions Node's own
// dispatches messages slowly enough to add ~10 ms to the first delta: the client's cost, not the server's), else
// Node's own. The first line of output names the one used.
const [root, sessions, maxTokens] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
let WebSocketClient = globalThis.WebSocket;
let clientName = "node";
try {
  WebSocketClient = (await import("ws")).default;
  clientName = "ws";
} catch {
  // Node's own
}

function openSession() {
  return new Promise((resolve, reject) => {
    const ws = clientName === "ws"
      ? new WebSocketClient(`${root}/v1/realtime?model=llmsim`, { perMessageDeflate: false })
      : new WebSocketClient(`${root}/v1/realtime?model=llmsim`);
    const state = { ws, arrivals: [], sentAt: 0, done: null };
    ws.onmessage = (message) => {
      const arrived = performance.now();  // first: the client's own parsing is not the server's lateness
      const data = message.data.toString();
      if (data.includes('"type":"response.output_text.delta"')) {
        state.arrivals.push((arrived - state.sentAt) / 1000);
        return;
      }
      if (!data.includes('"type":"session.created"') && !data.includes('"type":"conversation.item.done"')
          && !data.includes('"type":"response.done"') && !data.includes('"type":"error"')) {
        return;  // the other events (openings, the text's done) are not timed: no need to parse them
      }
      const event = JSON.parse(data);
      if (event.type === "session.created") {
        ws.send(JSON.stringify({ type: "session.update", session: { type: "realtime", output_modalities: ["text"] } }));
        ws.send(JSON.stringify({ type: "conversation.item.create", item: { type: "message", role: "user",
          content: [{ type: "input_text", text: "Tell me a story." }] } }));
      } else if (event.type === "conversation.item.done" && !state.sentAt) {
        resolve(state);  // configured: ready for the response
      } else if (event.type === "response.done") {
        ws.close();
        state.done(state.arrivals);
      } else if (event.type === "error") {
        reject(new Error(JSON.stringify(event.error)));
      }
    };
    ws.onerror = (error) => reject(error);
  });
}

const ready = await Promise.all(Array.from({ length: sessions }, openSession));
const results = await Promise.all(ready.map((state) => new Promise((resolve) => {
  state.done = resolve;
  state.sentAt = performance.now();
  state.ws.send(JSON.stringify({ type: "response.create", response: { max_output_tokens: maxTokens } }));
})));
process.stdout.write(JSON.stringify({ client: clientName, arrivals: results }));
