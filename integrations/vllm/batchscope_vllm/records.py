"""One vLLM engine step as a Batchscope IterationRecord (schema v2, engine/telemetry.py).

This module is plain data and imports nothing from vLLM, so the record layout is tested without
an engine. ``tap.py`` reads vLLM's scheduler into a ``ScheduledStep`` (when ``schedule()``
returns) and a ``StepOutcome`` (when ``update_from_output()`` returns); ``RecordBuilder`` turns
the pair into a record dict.

How the fields map onto vLLM (v1 engine):

- segments: one per request in ``SchedulerOutput.num_scheduled_tokens``, ordered as the model
  runner packed its rows: ``ModelRunnerOutput.req_ids`` is the persistent batch's order
  *after* the runner added, condensed and (for backends that ask, e.g. FlashInfer or MLA)
  reordered decodes before prefills, i.e. the order of ``query_start_loc``. When that list does
  not cover the scheduled requests, the scheduler's order is used and ``source.row_order``
  says "scheduled".
- ``num_cached``: the request's ``num_computed_tokens`` before the step (prefix-cache hits and
  earlier chunks); ``num_keys`` = ``num_cached + num_rows``.
- kinds: a (re)admitted request must compute up to ``prefill_target`` = its token count when it
  was admitted (prompt, plus outputs after a preemption, which vLLM recomputes). A segment that
  starts at the admission's cache hit and reaches the target is a "prefill", a part of it a
  "prefill_chunk", anything past the target a "decode".
- KV pool: vLLM's block pool at the end of ``schedule()``, the moment the step's block tables
  were fixed. Block 0 is vLLM's null block (a placeholder that is never handed out); it is
  shown with ref count 1 and no owner, so ``num_free`` (vLLM's free queue) equals the blocks
  with ref count 0. vLLM does not record who allocated a block; ``OwnerTracker`` keeps the
  first holder as owner until it lets go, then the next holder (a prefix-cache revival).
  Above ``MAX_SHIPPED_BLOCKS`` blocks, ``ref_counts``, ``owners`` and ``cached`` are None and
  ``num_cached`` counts prefix-cache entries instead of scanning the pool.
- source: the engine, its version, the row order, ``scheduling`` ("sync" or "async"), the
  ``data_parallel_rank`` whose scheduler ran the step and the ``adapter`` (the release whose
  reads were used, adapters/).
- ``discarded: true`` on a segment: the request finished or was aborted before this step's
  output came back (async scheduling keeps a step in flight): its rows ran, vLLM dropped what
  they sampled.
- ``num_waiting`` / ``num_running``: counted from the record's own ``requests`` states, so the
  numbers and the states they summarise cannot disagree.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SCHEMA_VERSION = 2
ENGINE = "vllm"
PHASES = ("schedule", "execute", "update")
MAX_SHIPPED_BLOCKS = 16384
LIVE_STATES = ("waiting", "running", "preempted", "finished")


@dataclass(slots=True)
class KVSnapshot:
    num_blocks: int
    block_size: int
    num_free: int
    num_cached: int
    ref_counts: list[int] | None
    owners: list[str | None] | None
    cached: list[int] | None

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class Admission:
    """A request (re)entering the running set: where its prefill starts and must reach."""
    num_cached: int  # prefix-cache hit tokens
    prefill_target: int


@dataclass(slots=True)
class ScheduledStep:
    """What ``schedule()`` decided, read when it returned (before the workers ran the step)."""
    t_start: float  # time.time() when schedule() was called
    schedule_ms: float
    num_scheduled: dict[str, int]  # in the scheduler's order
    num_computed: dict[str, int]  # per scheduled request, before the step
    num_prompt_tokens: dict[str, int]
    block_tables: dict[str, list[int]]
    kv: KVSnapshot
    admitted: dict[str, Admission] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)


@dataclass(slots=True)
class LiveRequest:
    status: str  # one of LIVE_STATES; "running" becomes prefilling/decoding in the record
    num_prompt_tokens: int
    num_computed_tokens: int
    num_output_tokens: int


@dataclass(slots=True)
class StepOutcome:
    """What ``update_from_output()`` saw and left behind."""
    t_end: float
    execute_ms: float
    update_ms: float
    row_order: list[str] | None  # ModelRunnerOutput.req_ids
    sampled: dict[str, int]
    finished: dict[str, str]
    aborted: list[str]
    requests: dict[str, LiveRequest]
    # scheduled requests that had finished before this step's output came back (async
    # scheduling): their rows ran, vLLM dropped what they sampled
    discarded: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class EngineSettings:
    version: str
    policy: str
    token_budget: int
    chunked_prefill: bool
    scheduling: str = "sync"  # "async": schedule() of step N+1 runs before update of N
    data_parallel_rank: int = 0
    adapter: str = ""  # the vLLM release whose adapter read the scheduler ("0.34")


class RecordBuilder:
    """Numbers the steps and remembers each request's admission to classify its segments."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._step = 0
        self._admissions: dict[str, Admission] = {}

    def build(self, sched: ScheduledStep, outcome: StepOutcome) -> dict:
        self._admissions.update(sched.admitted)
        order, row_order = packed_order(sched.num_scheduled, outcome.row_order)
        segments = [self._segment(rid, sched, outcome) for rid in order]
        requests = {rid: self._state(rid, r) for rid, r in outcome.requests.items()}
        cu = [0]
        for seg in segments:
            seg["row_start"] = cu[-1]
            cu.append(cu[-1] + seg["num_rows"])
        record = {
            "schema_version": SCHEMA_VERSION,
            "step": self._step,
            "t_start": sched.t_start,
            "t_end": outcome.t_end,
            "durations_ms": self._durations(sched, outcome),
            "policy": self.settings.policy,
            "token_budget": self.settings.token_budget,
            "chunked_prefill": self.settings.chunked_prefill,
            "num_rows": cu[-1],
            "padded_rows": len(segments) * max((s["num_rows"] for s in segments), default=0),
            "segments": segments,
            "cu_seqlens_q": cu,
            "seq_lens_k": [s["num_keys"] for s in segments],
            "block_tables": sched.block_tables,
            "kv": sched.kv.to_dict(),
            "admitted": {rid: a.num_cached for rid, a in sched.admitted.items()},
            "preempted": list(sched.preempted),
            "finished": dict(outcome.finished),
            "aborted": list(outcome.aborted),
            "sampled": dict(outcome.sampled),
            "requests": requests,
            **queue_counts(requests),
            "error": None,
            "source": self._source(row_order),
        }
        self._step += 1
        for rid in outcome.finished:
            self._admissions.pop(rid, None)
        return record

    def _source(self, row_order: str) -> dict:
        settings = self.settings
        return {"engine": ENGINE, "version": settings.version, "row_order": row_order,
                "scheduling": settings.scheduling, "data_parallel_rank": settings.data_parallel_rank,
                "adapter": settings.adapter}

    def _segment(self, rid: str, sched: ScheduledStep, outcome: StepOutcome) -> dict:
        rows, cached = sched.num_scheduled[rid], sched.num_computed[rid]
        extra = {"discarded": True} if rid in outcome.discarded else {}
        return {
            "request_id": rid,
            "kind": self._kind(rid, cached, rows, sched.num_prompt_tokens[rid]),
            "row_start": 0,  # set by build() once the order is known
            "num_rows": rows,
            "num_cached": cached,
            "num_keys": cached + rows,
            "num_prompt_tokens": sched.num_prompt_tokens[rid],
            "sampled": rid in outcome.sampled,
            **extra,
        }

    def _kind(self, rid: str, cached: int, rows: int, num_prompt_tokens: int) -> str:
        admission = self._admissions.get(rid, Admission(0, num_prompt_tokens))
        if cached >= admission.prefill_target:
            return "decode"
        if cached == admission.num_cached and cached + rows >= admission.prefill_target:
            return "prefill"
        return "prefill_chunk"

    def _state(self, rid: str, request: LiveRequest) -> dict:
        target = self._prefill_target(rid, request.num_prompt_tokens)
        status = request.status
        if status == "running":
            status = "prefilling" if request.num_computed_tokens < target else "decoding"
        return {
            "status": status,
            "num_prompt_tokens": request.num_prompt_tokens,
            "num_computed_tokens": request.num_computed_tokens,
            "num_output_tokens": request.num_output_tokens,
            "prefill_target": target,
        }

    def _prefill_target(self, rid: str, num_prompt_tokens: int) -> int:
        admission = self._admissions.get(rid)
        return admission.prefill_target if admission else num_prompt_tokens

    @staticmethod
    def _durations(sched: ScheduledStep, outcome: StepOutcome) -> dict[str, float]:
        durations = {"schedule": sched.schedule_ms, "execute": outcome.execute_ms,
                     "update": outcome.update_ms}
        durations = {name: round(max(0.0, ms), 4) for name, ms in durations.items()}
        durations["total"] = round(max(0.0, (outcome.t_end - sched.t_start) * 1e3), 4)
        return durations


def queue_counts(requests: dict[str, dict]) -> dict[str, int]:
    """``num_waiting`` / ``num_running`` of a record, counted from its own request states."""
    statuses = [state["status"] for state in requests.values()]
    return {"num_waiting": sum(s in ("waiting", "preempted") for s in statuses),
            "num_running": sum(s in ("prefilling", "decoding") for s in statuses)}


def packed_order(num_scheduled: dict[str, int], runner_order: list[str] | None
                 ) -> tuple[list[str], str]:
    """The scheduled requests in the runner's row order when it reported one covering them all
    (it also lists requests of the persistent batch that got no tokens this step), else in the
    scheduler's order. Returns the order and ``source.row_order``."""
    if runner_order is not None:
        order = [rid for rid in runner_order if rid in num_scheduled]
        if len(order) == len(num_scheduled):
            return order, "packed"
    return list(num_scheduled), "scheduled"


class OwnerTracker:
    """Who owns each physical block: the request that allocated it, or that revived it from
    the prefix cache after its owner let go (vLLM only counts references)."""

    def __init__(self, num_blocks: int) -> None:
        self._owners: list[str | None] = [None] * num_blocks

    def update(self, holders: Iterable[tuple[str, Iterable[int]]]) -> list[str | None]:
        """``holders``: (request id, block ids) for every request holding blocks, oldest first."""
        previous = self._owners
        owners: list[str | None] = [None] * len(previous)
        for rid, block_ids in holders:
            for block_id in block_ids:
                if owners[block_id] is None or previous[block_id] == rid:
                    owners[block_id] = rid
        self._owners = owners  # never mutated once returned: records may share it
        return owners
