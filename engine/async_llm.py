"""AsyncLLM: the concurrent front used by the dashboard and the HTTP API.

One background thread owns the engine and runs the step loop; nothing else touches engine
state. Other threads and asyncio tasks talk to it through a command inbox (add, abort,
reconfigure), which they append to under a short lock and never wait on a step for. Each
request's deltas go to its ``RequestStream`` (iterate it from a thread or ``async for`` it
from an event loop); each step's ``IterationRecord`` goes to every subscriber, called on the
engine thread, so subscribers must only hand the record off (the viz hub enqueues it).
Presenter controls (pause, single step, slow motion) act between steps.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from .config import EngineConfig
from .llm_engine import LLMEngine, Prompt
from .outputs import RequestDelta, RequestOutput
from .request import Request
from .sampling_params import SamplingParams
from .telemetry import IterationRecord, RequestEvent

log = logging.getLogger(__name__)
RECONFIGURABLE = ("policy", "max_num_batched_tokens", "enable_chunked_prefill")


class RequestStream:
    """The deltas of one request, in order, ending with one whose ``finished`` is True."""

    def __init__(self, request: Request):
        self.request_id = request.request_id
        self.prompt_token_ids = list(request.prompt_token_ids)
        self.arrival_time = request.arrival_time
        self._items: deque[RequestDelta] = deque()
        self._cond = threading.Condition()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def put(self, delta: RequestDelta) -> None:
        with self._cond:
            self._items.append(delta)
            self._cond.notify_all()
            waiter = self._waiter
        if waiter is not None:
            loop, event = waiter
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the consumer's loop is gone
                pass

    def __iter__(self):
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                delta = self._items.popleft()
            yield delta
            if delta.finished:
                return

    def __aiter__(self):
        return self._async_deltas()

    async def _async_deltas(self):
        event = asyncio.Event()
        with self._cond:
            self._waiter = (asyncio.get_running_loop(), event)
        while True:
            with self._cond:
                delta = self._items.popleft() if self._items else None
                if delta is None:
                    event.clear()
            if delta is None:
                await event.wait()
                continue
            yield delta
            if delta.finished:
                return

    def collect(self) -> RequestOutput:
        """Block until the request ends; return the whole output."""
        return self._merge(list(self))

    async def result(self) -> RequestOutput:
        return self._merge([d async for d in self])

    def _merge(self, deltas: list[RequestDelta]) -> RequestOutput:
        out = RequestOutput(self.request_id, self.prompt_token_ids, arrival_time=self.arrival_time)
        for delta in deltas:
            out.token_ids.extend(delta.token_ids)
            out.text += delta.text
            out.finish_reason, out.error = delta.finish_reason, delta.error
        return out


class AsyncLLM:
    def __init__(self, model: str = "default", **config):
        self.model = model
        self.config = EngineConfig.from_kwargs(**config)
        self.engine: LLMEngine | None = None
        self.state = "loading"  # loading | ready | failed | stopped
        self.load_error: str | None = None
        self.last_record: IterationRecord | None = None
        self._cond = threading.Condition()
        self._inbox: deque[tuple] = deque()
        self._streams: dict[str, RequestStream] = {}
        self._subscribers: list[Callable[[IterationRecord], None]] = []
        self._event_subscribers: list[Callable[[RequestEvent], None]] = []
        self._paused = False
        self._steps_allowed = 0
        self._min_step_interval = 0.0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batchscope-engine", daemon=True)
        self._thread.start()

    # ---- lifecycle -----------------------------------------------------------------------
    def wait_ready(self, timeout: float | None = None) -> LLMEngine:
        if not self._ready.wait(timeout):
            raise TimeoutError("the model is still loading")
        if self.engine is None:
            raise RuntimeError(f"the model failed to load: {self.load_error}")
        return self.engine

    def shutdown(self) -> None:
        with self._cond:
            self.state = "stopped"
            self._cond.notify_all()
        self._thread.join(timeout=10)

    # ---- requests ------------------------------------------------------------------------
    def add_request(self, prompt: Prompt, params: SamplingParams | None = None,
                    request_id: str | None = None) -> RequestStream:
        """Validate now (raising ValueError), queue for the next step, return its stream."""
        engine = self.engine
        if engine is None or self.state != "ready":
            raise RuntimeError("the model is not loaded yet" if self.state == "loading"
                               else f"the engine is {self.state}")
        request = engine.make_request(prompt, params, request_id)
        prompt_text = None
        if self._event_subscribers:  # decoded here, not on the engine thread
            prompt_text = prompt if isinstance(prompt, str) else engine.detokenize(request.prompt_token_ids)
        stream = RequestStream(request)
        with self._cond:
            if self.state != "ready":
                raise RuntimeError(f"the engine is {self.state}")
            if request.request_id in self._streams:
                raise ValueError(f"request_id {request.request_id!r} is already in use")
            self._streams[request.request_id] = stream
            self._inbox.append(("add", (request, prompt_text)))
            self._cond.notify_all()
        return stream

    def abort(self, request_id: str) -> None:
        self._command("abort", request_id)

    # ---- telemetry and presenter controls ------------------------------------------------
    def subscribe(self, callback: Callable[[IterationRecord], None]) -> Callable[[], None]:
        """Receive every step's record; returns a function that unsubscribes."""
        return self._add_listener("_subscribers", callback)

    def subscribe_events(self, callback: Callable[[RequestEvent], None]) -> Callable[[], None]:
        """Receive every request's arrival and text deltas; returns an unsubscribe function."""
        return self._add_listener("_event_subscribers", callback)

    def _add_listener(self, attribute: str, callback: Callable) -> Callable[[], None]:
        """Listeners run on the engine thread and must only hand data off. The lists are
        replaced, never mutated, so the engine thread iterates them without the lock."""
        with self._cond:
            setattr(self, attribute, [*getattr(self, attribute), callback])

        def remove() -> None:
            with self._cond:
                setattr(self, attribute, [c for c in getattr(self, attribute) if c is not callback])

        return remove

    def pause(self) -> None:
        with self._cond:
            self._paused, self._steps_allowed = True, 0

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def step_once(self) -> None:
        """While paused, let exactly one more step run."""
        with self._cond:
            self._steps_allowed += 1
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def min_step_interval(self) -> float:
        return self._min_step_interval

    def set_min_step_interval(self, seconds: float) -> None:
        """Slow motion: each step takes at least this long (0 = full speed)."""
        if not 0 <= seconds <= 10:
            raise ValueError(f"min step interval must be in [0, 10] seconds, got {seconds}")
        with self._cond:
            self._min_step_interval = float(seconds)
            self._cond.notify_all()

    def reconfigure(self, **changes) -> None:
        """Change policy / token budget / chunked prefill; applied before the next step."""
        unknown = sorted(set(changes) - set(RECONFIGURABLE))
        if unknown:
            raise ValueError(f"reconfigure: cannot change {unknown}; allowed: {RECONFIGURABLE}")
        EngineConfig.from_kwargs(**{**self._config_view(), **changes})  # validates
        self._command("reconfigure", changes)

    def _config_view(self) -> dict:
        return {name: getattr(self.config, name) for name in RECONFIGURABLE}

    def _command(self, *command) -> None:
        with self._cond:
            self._inbox.append(command)
            self._cond.notify_all()

    # ---- the engine thread ---------------------------------------------------------------
    def _run(self) -> None:
        """The engine thread: load the model, then rounds of commands and one step each."""
        if not self._load():
            return
        try:
            while self._round(self.engine):
                pass
        finally:
            self._fail_streams("abort", "the engine stopped")

    def _load(self) -> bool:
        try:
            engine = LLMEngine(self.model, self.config)
        except Exception as exc:
            log.exception("model load failed")
            self.load_error = f"{type(exc).__name__}: {exc}"
            self.state = "failed"
            self._ready.set()
            return False
        with self._cond:
            self.engine = engine
            if self.state == "loading":
                self.state = "ready"
        self._ready.set()
        return self.state == "ready"

    def _idle(self, engine: LLMEngine) -> bool:
        """Nothing to do until a command arrives (called under the lock)."""
        if self._inbox or self.state == "stopped":
            return False
        if engine.has_unreported_aborts and not engine.has_unfinished:
            return False  # one empty step will tell the viewers
        return not engine.has_unfinished or (self._paused and self._steps_allowed == 0)

    def _round(self, engine: LLMEngine) -> bool:
        """Apply queued commands, then run one step if allowed. False once stopped."""
        with self._cond:
            while self._idle(engine):
                self._cond.wait()
            if self.state == "stopped":
                return False
            commands = list(self._inbox)
            self._inbox.clear()
        for command in commands:
            self._apply_safely(engine, command)
        with self._cond:
            run = engine.has_unfinished and (not self._paused or self._steps_allowed > 0)
            if run and self._paused:
                self._steps_allowed -= 1
        if run:
            started = time.perf_counter()
            self._step(engine)
            self._slow_motion(started)
        elif engine.has_unreported_aborts and not engine.has_unfinished:
            self._step(engine)  # an empty step: its record reports the aborts
        return True

    def _apply_safely(self, engine: LLMEngine, command: tuple) -> None:
        try:
            self._apply(engine, command)
        except Exception as exc:  # a bad command must not end the engine thread
            log.exception("engine command %r failed", command[0])
            if command[0] == "add":
                request_id = command[1][0].request_id
                self._deliver([RequestDelta(request_id, [], "", True, "error", f"{type(exc).__name__}: {exc}")])

    def _apply(self, engine: LLMEngine, command: tuple) -> None:
        kind, arg = command
        if kind == "add":
            request, prompt_text = arg
            engine.add(request)
            self._emit(RequestEvent("arrival", request.request_id, time.time(), prompt=prompt_text,
                                    num_prompt_tokens=request.num_prompt_tokens))
        elif kind == "abort":
            delta = engine.abort_request(arg)
            if delta is not None:
                self._deliver([delta])
        elif kind == "reconfigure":
            for name, value in arg.items():
                setattr(engine.config, name, value)
            engine.config.ensure_whole_prompts_fit()

    def _step(self, engine: LLMEngine) -> None:
        try:
            result = engine.step()
        except Exception as exc:  # a bug outside the forward pass: fail what is live, keep serving
            log.exception("engine step crashed")
            self._fail_streams("error", f"internal engine error: {type(exc).__name__}: {exc}", engine)
            return
        self._deliver(result.deltas)
        self.last_record = result.record
        for callback in self._subscribers:
            try:
                callback(result.record)
            except Exception:
                log.exception("telemetry subscriber failed")

    def _fail_streams(self, reason: str, message: str, engine: LLMEngine | None = None) -> None:
        """End every open stream (freeing its request's blocks when the engine still runs)."""
        with self._cond:
            request_ids = list(self._streams)
        for request_id in request_ids:
            if engine is not None:
                engine.abort_request(request_id, reason)
        self._deliver([RequestDelta(rid, [], "", True, reason, message) for rid in request_ids])

    def _deliver(self, deltas: list[RequestDelta]) -> None:
        with self._cond:
            streams = [(self._streams.get(d.request_id), d) for d in deltas]
            for delta in deltas:
                if delta.finished:
                    self._streams.pop(delta.request_id, None)
        for stream, delta in streams:
            if stream is not None:
                stream.put(delta)
        if self._event_subscribers:
            now = time.time()
            for d in deltas:
                self._emit(RequestEvent("delta", d.request_id, now, token_ids=d.token_ids, text=d.text,
                                        finished=d.finished, finish_reason=d.finish_reason, error=d.error))

    def _emit(self, event: RequestEvent) -> None:
        for callback in self._event_subscribers:
            try:
                callback(event)
            except Exception:
                log.exception("event subscriber failed")

    def _slow_motion(self, started: float) -> None:
        with self._cond:
            deadline = started + self._min_step_interval
            while self.state != "stopped" and (left := deadline - time.perf_counter()) > 0:
                self._cond.wait(left)
                deadline = started + self._min_step_interval
