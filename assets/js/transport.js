// The telemetry stream: the websocket /ws/telemetry, or the same messages over SSE
// (GET /telemetry/stream) where a proxy will not carry websockets.
//
// The websocket is tried first; if it cannot open or closes before its first message, the page
// falls back to SSE for good. Either way a lost connection is reopened with backoff (0.3 s
// doubling to 5 s, reset by a message), and a connection silent for 6 s (the server speaks at
// least every 2 s) is closed and reopened. The environment (WebSocket, EventSource, timers) is
// passed in, so the state machine runs under node's tests with fakes.

export const SILENCE_MS = 6000;
const BACKOFF_MS = 300, MAX_BACKOFF_MS = 5000;

// ``onMessage(parsed)``; ``onLink(kind)`` with "ws" | "sse" | "reconnecting".
export function openTelemetry({ base, onMessage, onLink, env }) {
  const link = { kind: "ws", current: null, retries: 0, timer: null, silence: null, closed: false };

  const url = (path, protocol) => {
    const u = new URL(path, base);
    if (protocol) u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  };

  function heard(data) {
    link.retries = 0;
    env.clearTimeout(link.silence);
    link.silence = env.setTimeout(() => lost(link.current), SILENCE_MS);
    let message;
    try { message = JSON.parse(data); } catch { return; }
    if (message.type !== "ping") onMessage(message);
  }

  function lost(connection) {
    if (connection !== link.current || link.closed) return;
    if (link.kind === "ws" && !connection.heard) link.kind = "sse";  // never worked: fall back
    connection.close();
    link.current = null;
    env.clearTimeout(link.silence);
    onLink("reconnecting");
    const delay = Math.min(MAX_BACKOFF_MS, BACKOFF_MS * 2 ** link.retries++);
    link.timer = env.setTimeout(open, delay);
  }

  function open() {
    link.current = link.kind === "ws" ? openSocket() : openStream();
    link.silence = env.setTimeout(() => lost(link.current), SILENCE_MS);
  }

  function openSocket() {
    const ws = new env.WebSocket(url("/ws/telemetry", true));
    const connection = { heard: false, close: () => { ws.onclose = ws.onerror = ws.onmessage = null; ws.close(); } };
    ws.onmessage = (event) => { if (!connection.heard) { connection.heard = true; onLink("ws"); } heard(event.data); };
    ws.onclose = () => lost(connection);
    ws.onerror = () => lost(connection);
    return connection;
  }

  function openStream() {
    const source = new env.EventSource(url("/telemetry/stream", false));
    const connection = { heard: false, close: () => { source.onmessage = source.onerror = null; source.close(); } };
    source.onmessage = (event) => { if (!connection.heard) { connection.heard = true; onLink("sse"); } heard(event.data); };
    source.onerror = () => lost(connection);
    return connection;
  }

  open();
  return {
    get kind() { return link.kind; },
    get connected() { return !!(link.current && link.current.heard); },
    close() {
      link.closed = true;
      env.clearTimeout(link.timer);
      env.clearTimeout(link.silence);
      if (link.current) link.current.close();
    },
  };
}
