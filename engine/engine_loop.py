"""EngineLoop: the one thread that owns the engine.

It loads the model, then runs rounds: take the commands queued in the inbox (add, abort,
reconfigure, call: an engine method whose caller waits for its result), apply them, run one
step if allowed. Other threads append commands under a short lock and never wait on a step
(``call``'s caller waits for its own command only). Presenter controls (pause, single step,
slow motion) act between steps.

States: "loading" -> "ready" -> "stopped" (shutdown), or "failed" (the model did not load), or
"dead" (the thread died of an error no step handles). Once dead, new requests are refused with
``EngineDeadError`` and every open stream ends with finish_reason "error" and the cause.
A step that raises (a bug outside the forward pass) fails the requests the engine holds and the
loop goes on; a request whose "add" is still in the inbox is spared and runs with its stream.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from .config import EngineConfig
from .fanout import Fanout
from .llm_engine import LLMEngine
from .request import Request
from .request_stream import RequestStream

log = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """The engine thread died; nothing more will run."""


class EngineLoop:
    def __init__(self, model: str, config: EngineConfig, fanout: Fanout):
        self.model = model
        self.config = config
        self.fanout = fanout
        self.engine: LLMEngine | None = None
        self.state = "loading"
        self.error: str | None = None
        self.paused = False
        self.min_step_interval = 0.0
        self.load_started = time.monotonic()
        self.load_seconds: float | None = None
        self._steps_allowed = 0
        self._cond = threading.Condition()
        self._inbox: deque[tuple] = deque()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batchscope-engine", daemon=True)
        self._thread.start()

    # ---- other threads -------------------------------------------------------------------
    def elapsed_loading(self) -> float:
        return round(time.monotonic() - self.load_started, 1)

    def wait_ready(self, timeout: float | None) -> LLMEngine:
        if not self._ready.wait(timeout):
            raise TimeoutError("the model is still loading")
        if self.engine is None:
            raise RuntimeError(f"the model failed to load: {self.error}" if self.state == "failed"
                               else f"the engine is {self.state}: {self.error}")
        return self.engine

    def ready_engine(self) -> LLMEngine:
        """The engine, or the error that says why requests cannot be taken now."""
        engine = self.engine
        if self.state == "dead":
            raise EngineDeadError(f"the engine is dead: {self.error}")
        if engine is None or self.state != "ready":
            if self.state == "loading":
                raise RuntimeError("the model is not loaded yet")
            raise RuntimeError(f"the engine is {self.state}" + (f": {self.error}" if self.error else ""))
        return engine

    def add(self, request: Request, prompt_text: str | None) -> RequestStream:
        """Open the request's stream and queue it for the next round, atomically with respect
        to the loop's end (a request is never queued after its stream could be failed)."""
        with self._cond:
            self.ready_engine()
            stream = self.fanout.open(request)
            self._inbox.append(("add", request, prompt_text))
            self._cond.notify_all()
        return stream

    def command(self, *command) -> None:
        with self._cond:
            self._inbox.append(command)
            self._cond.notify_all()

    def call(self, method: Callable[[LLMEngine], object], timeout: float) -> object:
        """``method(engine)`` run between steps on the engine thread; its result, or what it
        raised (TimeoutError after ``timeout`` seconds, RuntimeError when the engine ends first)."""
        future: Future = Future()
        with self._cond:
            self.ready_engine()
            self._inbox.append(("call", method, future))
            self._cond.notify_all()
        return future.result(timeout)

    def pause(self) -> None:
        with self._cond:
            self.paused, self._steps_allowed = True, 0

    def resume(self) -> None:
        with self._cond:
            self.paused = False
            self._cond.notify_all()

    def step_once(self) -> None:
        with self._cond:
            self._steps_allowed += 1
            self._cond.notify_all()

    def set_min_step_interval(self, seconds: float) -> None:
        with self._cond:
            self.min_step_interval = float(seconds)
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            if self.state in ("loading", "ready"):
                self.state = "stopped"
            self._cond.notify_all()
        self._thread.join(timeout=10)

    # ---- the engine thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            if not self._load():
                return
            while self._round(self.engine):
                pass
        except BaseException as exc:  # whatever kills the thread must show
            log.exception("the engine thread died")
            self._end("dead", f"the engine thread died: {type(exc).__name__}: {exc}", "error")
        else:
            self._end("stopped", "the engine stopped", "abort")
        finally:
            self._ready.set()

    def _load(self) -> bool:
        try:
            engine = LLMEngine(self.model, self.config)
        except Exception as exc:
            log.exception("model load failed")
            with self._cond:
                self.error = f"{type(exc).__name__}: {exc}"
                self.state = "failed"
            return False
        with self._cond:
            self.engine = engine
            self.load_seconds = self.elapsed_loading()
            if self.state == "loading":
                self.state = "ready"
        self._ready.set()
        return self.state == "ready"

    def _end(self, state: str, message: str, reason: str) -> None:
        """No round will run again: drop the queued adds and end every open stream."""
        with self._cond:
            if state == "dead":
                self.state, self.error = state, message
            dropped = list(self._inbox)
            self._inbox.clear()
            open_ids = self.fanout.open_ids()
            self._cond.notify_all()
        for command in dropped:
            if command[0] == "call":
                command[2].set_exception(RuntimeError(message))
        self.fanout.fail(open_ids, reason, message)

    def _idle(self, engine: LLMEngine) -> bool:
        """Nothing to do until a command arrives (called under the lock)."""
        if self._inbox or self.state == "stopped":
            return False
        if engine.has_unreported_changes and not engine.has_unfinished:
            return False  # one empty step will tell the viewers
        return not engine.has_unfinished or (self.paused and self._steps_allowed == 0)

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
            run = engine.has_unfinished and (not self.paused or self._steps_allowed > 0)
            if run and self.paused:
                self._steps_allowed -= 1
        if run:
            started = time.perf_counter()
            self._step(engine)
            self._slow_motion(started)
        elif engine.has_unreported_changes and not engine.has_unfinished:
            self._step(engine)  # an empty step: its record reports the aborts, or the freed pool
        return True

    def _apply_safely(self, engine: LLMEngine, command: tuple) -> None:
        try:
            self._apply(engine, command)
        except Exception as exc:  # a bad command must not end the engine thread
            log.exception("engine command %r failed", command[0])
            if command[0] == "add":
                self.fanout.fail([command[1].request_id], "error", f"{type(exc).__name__}: {exc}")

    def _apply(self, engine: LLMEngine, command: tuple) -> None:
        kind, *args = command
        if kind == "add":
            request, prompt_text = args
            engine.add(request)
            self.fanout.arrival(request, prompt_text)
        elif kind == "abort":
            delta = engine.abort_request(args[0])
            if delta is not None:
                self.fanout.deliver([delta])
        elif kind == "reconfigure":
            engine.reconfigure(**args[0])
        elif kind == "call":
            method, future = args
            try:
                future.set_result(method(engine))
            except Exception as exc:  # the caller's to handle
                future.set_exception(exc)

    def _step(self, engine: LLMEngine) -> None:
        try:
            result = engine.step()
        except Exception as exc:  # a bug outside the forward pass: fail what is live, keep serving
            log.exception("engine step crashed")
            self._fail_live(engine, f"internal engine error: {type(exc).__name__}: {exc}")
            return
        self.fanout.step(result)

    def _fail_live(self, engine: LLMEngine, message: str) -> None:
        """Fail every open request except those whose "add" is still in the inbox (they have
        not met the engine yet and run normally, with their streams)."""
        with self._cond:  # add() opens a stream and queues its add under this lock
            queued = {command[1].request_id for command in self._inbox if command[0] == "add"}
            failed = [rid for rid in self.fanout.open_ids() if rid not in queued]
        for request_id in failed:
            engine.abort_request(request_id, "error")
        self.fanout.fail(failed, "error", message)

    def _slow_motion(self, started: float) -> None:
        with self._cond:
            deadline = started + self.min_step_interval
            while self.state != "stopped" and (left := deadline - time.perf_counter()) > 0:
                self._cond.wait(left)
                deadline = started + self.min_step_interval
