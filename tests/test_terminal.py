"""What the terminal says when a presenter starts the dashboard: where it is, when the model is
ready and where the API is, without progress bars for every engine it loads."""
from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

from support.server import free_port

ROOT = Path(__file__).resolve().parents[1]
READY_LIMIT_S = 120


def test_the_terminal_says_when_the_model_is_ready_and_where_the_api_is(tiny_model_dir):
    port = free_port()
    command = [sys.executable, str(ROOT / "app.py"), "--model", str(tiny_model_dir), "--host", "127.0.0.1",
               "--port", str(port), "--num-kv-blocks", "64"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said_lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [said_lines.put(line) for line in server.stdout], daemon=True).start()
    lines: list[str] = []
    try:
        while not any("ready at" in line for line in lines):
            lines.append(said_lines.get(timeout=READY_LIMIT_S))
    except queue.Empty:
        pass
    finally:
        server.terminate()
        server.wait(30)
    said = "".join(lines)
    assert f"ready at http://127.0.0.1:{port}" in said, said[-2000:]
    assert f"OpenAI API at http://127.0.0.1:{port}/v1" in said
    assert "Loading weights" not in said
