"""A stand-in for llama.cpp's ``llama-server`` (the parts the llama_cpp peer uses): ``--version``,
``GET /health``, and ``POST /completion`` streaming one token per server-sent event, except that,
as the real server does for a token whose text is not yet whole UTF-8, it holds some back: their
ids never come, only the count (``tokens_predicted``). Its "model" answers token
``(sum(prompt) + i) % 1000`` at step ``i``, so a test knows what to expect. The flags
it was started with are written to ``$FAKE_LLAMA_FLAGS`` (a file) for the test to check."""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base, n = sum(body["prompt"]), body["n_predict"]
        for i in range(n):
            if i % 3 == 1 or i == n - 1:
                continue  # as llama.cpp holds back a token whose text is an incomplete UTF-8 sequence
            chunk = {"content": "x", "tokens": [(base + i) % 1000], "stop": False, "tokens_predicted": i + 1}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        final = {"content": "", "tokens": [], "stop": True, "tokens_predicted": n}
        self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())

    def log_message(self, *args):
        pass


def main(argv: list[str]) -> None:
    if argv == ["--version"]:
        print("version: 0 (fake)", file=sys.stderr)
        return
    with open(os.environ["FAKE_LLAMA_FLAGS"], "w") as f:
        json.dump(argv, f)
    port = int(argv[argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
