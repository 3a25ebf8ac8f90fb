// The telemetry stream: the websocket /ws/telemetry, or the same messages over SSE
// (GET /telemetry/stream) where a proxy will not carry websockets.
//
// The websocket is tried first; if it cannot open or closes before its first message, the page
// falls back to SSE for good. Either way a lost connection is reopened with backoff (0.3 s
// doubling to 5 s, reset by a message), and a connection silent for SILENCE_MS (several of the
// server's STATUS_INTERVAL_S, viz/live/hub.py: it speaks at least that often) is closed and
// reopened. Where the browser has DecompressionStream the websocket asks for
// ?compress=deflate-raw: each message comes as raw DEFLATE bytes the server compressed once for
// every viewer (viz/live/frames.py), inflated here in arrival order. The environment (WebSocket,
// EventSource, timers, DecompressionStream) is passed in, so the state machine runs under node's
// tests with fakes.

export const SILENCE_MS = 6000;
const BACKOFF_MS = 300, MAX_BACKOFF_MS = 5000;

// ``onMessage(parsed)``; ``onLink(kind)`` with "ws" | "sse" | "reconnecting".
export function openTelemetry({ base, onMessage, onLink, env }) {
  return new TelemetryLink(base, onMessage, onLink, env);
}

class TelemetryLink {
  constructor(base, onMessage, onLink, env) {
    Object.assign(this, { base, onMessage, onLink, env });
    this.kind = "ws";
    this.current = null;
    this.retries = 0;
    this.timer = null;
    this.silence = null;
    this.closed = false;
    this.open();
  }

  get connected() { return !!(this.current && this.current.heard); }

  close() {
    this.closed = true;
    this.env.clearTimeout(this.timer);
    this.env.clearTimeout(this.silence);
    if (this.current) this.current.close();
  }

  open() {
    this.current = this.kind === "ws" ? this.openSocket() : this.openStream();
    this.watch();
  }

  // Reopen the link unless a message comes within SILENCE_MS.
  watch() {
    this.env.clearTimeout(this.silence);
    const connection = this.current;
    this.silence = this.env.setTimeout(() => this.lost(connection), SILENCE_MS);
  }

  // A message of a socket that asked for compression: binary ones are inflated; each is read
  // after those before it, and dropped if its connection was replaced meanwhile.
  heardDeflated(connection, data) {
    const inflate = () => (typeof data === "string" ? data : new Response(new Blob([data]).stream()
      .pipeThrough(new this.env.DecompressionStream("deflate-raw"))).text());
    connection.inflating = connection.inflating.then(inflate).then(
      (text) => { if (connection === this.current) this.heard(connection, "ws", text); },
      () => {});  // not DEFLATE: dropped, like a message that is not JSON
  }

  heard(connection, kind, data) {
    if (!connection.heard) { connection.heard = true; this.onLink(kind); }
    this.retries = 0;
    this.watch();
    let message;
    try { message = JSON.parse(data); } catch { return; }
    if (message.type !== "ping") this.onMessage(message);
  }

  lost(connection) {
    if (connection !== this.current || this.closed) return;
    if (this.kind === "ws" && !connection.heard) this.kind = "sse";  // never worked: fall back
    connection.close();
    this.current = null;
    this.env.clearTimeout(this.silence);
    this.onLink("reconnecting");
    const delay = Math.min(MAX_BACKOFF_MS, BACKOFF_MS * 2 ** this.retries++);
    this.timer = this.env.setTimeout(() => this.open(), delay);
  }

  url(path, websocket) {
    const u = new URL(path, this.base);
    if (websocket) u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  }

  openSocket() {
    const deflated = !!this.env.DecompressionStream;
    const ws = new this.env.WebSocket(this.url("/ws/telemetry", true) + (deflated ? "?compress=deflate-raw" : ""));
    if (deflated) ws.binaryType = "arraybuffer";
    const connection = { heard: false, inflating: Promise.resolve(),
      close: () => { ws.onclose = ws.onerror = ws.onmessage = null; ws.close(); } };
    ws.onmessage = (event) => (deflated ? this.heardDeflated(connection, event.data)
      : this.heard(connection, "ws", event.data));
    ws.onclose = ws.onerror = () => this.lost(connection);
    return connection;
  }

  openStream() {
    const source = new this.env.EventSource(this.url("/telemetry/stream", false));
    const connection = { heard: false, close: () => { source.onmessage = source.onerror = null; source.close(); } };
    source.onmessage = (event) => this.heard(connection, "sse", event.data);
    source.onerror = () => this.lost(connection);
    return connection;
  }
}
