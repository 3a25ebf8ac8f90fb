"""IterationRecord: the one contract between the engine and everything that watches it.

Every engine step produces exactly one record. It is plain data (JSON-serializable through
``to_dict``), versioned with ``SCHEMA_VERSION``, and this module is its only documentation.
Views (viz/), the trace recorder and the metrics read records; none of them touch engine state.

Records come from several engines (Batchscope's own, a vLLM engine through its plugin, a
replayed trace), so a record names its ``source``, and its phases are the source's own.

Schema (version 2), as produced by ``IterationRecord.to_dict()``:

- ``schema_version`` int, ``step`` int (0-based, one per engine step)
- ``source``: ``{"engine": "batchscope" | "vllm" | ..., "version": str, "row_order": "packed" |
  "scheduled"}``; "packed": the segments are in the order the model runner packed the rows,
  "scheduled": in scheduler order (that runner may reorder rows). Optional:
  ``"data_parallel_rank"`` int, the data-parallel rank whose scheduler ran the step (vLLM runs
  one per rank); ``"rank_step"`` int, that rank's own step number, present when the ingest
  merged the ranks of a data-parallel engine into one stream (``step`` is then the stream's,
  numbered in arrival order); ``"plan"`` (Batchscope) the kernels the step ran on:
  ``engine/execution_plan.py``'s fields plus ``batch_invariant`` (older traces lack it)
- ``t_start``, ``t_end``: wall-clock seconds since the epoch (``time.time()``)
- ``durations_ms``: ``"total"`` plus any of the source's phases (Batchscope: ``PHASES``,
  schedule, prepare, forward, sample, postprocess; vLLM: schedule, execute, update), each a
  non-negative number; on CUDA Batchscope reads prepare/forward/sample from CUDA events.
- ``policy`` ("mixed" | "prefill_first"), ``token_budget`` (max_num_batched_tokens),
  ``chunked_prefill`` bool
- ``num_rows``: packed rows of this step (sum of segment rows); 0 for a step that scheduled no
  tokens (no segments): vLLM runs one right after requests finish and under async scheduling;
  its ``kv`` shows the blocks freed and it may list finished or aborted requests. Views keep
  showing the last step with rows as the current one and keep such a step in their histories;
  ``padded_rows``: rows a padded batch would need (num segments x longest segment)
- ``segments``: one per scheduled request, in row order:
  ``{"request_id", "kind" ("prefill" | "prefill_chunk" | "decode"), "row_start", "num_rows",
  "num_cached" (tokens of this request already in the KV cache before the step, i.e. the first
  position), "num_keys" (keys attended = num_cached + num_rows), "num_prompt_tokens",
  "sampled" (bool: whether a token was sampled from this segment's last row)}``.
  Positions of a segment are ``range(num_cached, num_keys)``.
- ``cu_seqlens_q``: ``[0, r0, r0+r1, ...]``; ``seq_lens_k``: per segment ``num_keys``
- ``block_tables``: ``{request_id: [physical block ids in logical order]}`` of scheduled requests
- ``kv``: ``{"num_blocks", "block_size", "num_free", "num_cached", "ref_counts": [per block],
  "owners": [per block: the request that allocated or revived it, None while free], "cached":
  [block ids holding a prefix-cache hash]}``. A block is free when its ref count is 0 (it may
  still be cached). A pool of more than ``KV_DETAIL_LIMIT`` blocks ships counts only:
  ``ref_counts``, ``owners`` and ``cached`` are then None.
- ``admitted``: ``{request_id: prefix-cache hit tokens}`` (a request resumed after preemption
  often hits its own freed blocks); ``preempted``: [request_id];
  ``finished``: ``{request_id: finish_reason}``; ``aborted``: [request_id]
- ``sampled``: ``{request_id: token_id}``
- ``requests``: live and just-finished requests, ``{request_id: {"status", "num_prompt_tokens",
  "num_computed_tokens", "num_output_tokens", "prefill_target"}}``, where ``prefill_target`` is the
  number of tokens the current (re)prefill must compute; status is one of
  "waiting", "prefilling", "decoding", "preempted", "finished".
- ``num_waiting``, ``num_running``: queue lengths after the step
- ``error``: None, or the message of an exception that failed this step's requests

RequestEvent (same version), from ``AsyncLLM.subscribe_events``: what happened to one request
between records, for text panels and traces. ``{"kind" ("arrival" | "delta"), "request_id",
"time", "prompt" (arrival: the prompt text, or None), "num_prompt_tokens" (arrival),
"token_ids" and "text" (delta: new tokens and newly final text), "finished", "finish_reason",
"error"}``. Deltas of one request concatenate to its final text.

Version 1 differs only in having no ``source``, exactly the Batchscope phases in
``durations_ms`` and always the per-block lists; ``validate_record`` accepts both versions and
``upgrade_record`` turns a version-1 record into a version-2 one, so old traces keep replaying.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCHEMA_VERSION = 2
SCHEMA_VERSIONS = (1, 2)  # what validate_record accepts

ENGINE_NAME = "batchscope"
ENGINE_VERSION = "0.2.0"
PHASES = ("schedule", "prepare", "forward", "sample", "postprocess")
ROW_ORDERS = ("packed", "scheduled")
KV_DETAIL_LIMIT = 16384  # larger pools ship block counts without per-block lists
BATCHSCOPE_SOURCE = {"engine": ENGINE_NAME, "version": ENGINE_VERSION, "row_order": "packed"}
V1_SOURCE = {"engine": ENGINE_NAME, "version": "", "row_order": "packed"}  # v1 never said which
SEGMENT_KINDS = ("prefill", "prefill_chunk", "decode")
REQUEST_STATES = ("waiting", "prefilling", "decoding", "preempted", "finished")


@dataclass(slots=True)
class Segment:
    request_id: str
    kind: str
    row_start: int
    num_rows: int
    num_cached: int
    num_keys: int
    num_prompt_tokens: int
    sampled: bool


@dataclass(slots=True)
class KVPoolState:
    num_blocks: int
    block_size: int
    num_free: int
    num_cached: int
    ref_counts: list[int] | None
    owners: list[str | None] | None
    cached: list[int] | None


@dataclass(slots=True)
class RequestState:
    status: str
    num_prompt_tokens: int
    num_computed_tokens: int
    num_output_tokens: int
    prefill_target: int


@dataclass(slots=True)
class IterationRecord:
    step: int
    t_start: float
    t_end: float
    durations_ms: dict[str, float]
    policy: str
    token_budget: int
    chunked_prefill: bool
    num_rows: int
    padded_rows: int
    segments: list[Segment]
    cu_seqlens_q: list[int]
    seq_lens_k: list[int]
    block_tables: dict[str, list[int]]
    kv: KVPoolState
    admitted: dict[str, int] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    sampled: dict[str, int] = field(default_factory=dict)
    requests: dict[str, RequestState] = field(default_factory=dict)
    num_waiting: int = 0
    num_running: int = 0
    error: str | None = None
    source: dict[str, object] = field(default_factory=lambda: dict(BATCHSCOPE_SOURCE))
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        """Plain dicts and lists; written out by hand because ``asdict`` deep-copies every
        per-block list recursively, which is most of a record's cost on a large pool."""
        data = {name: getattr(self, name) for name in _SCALAR_FIELDS}
        data["source"] = dict(self.source)
        data["durations_ms"] = dict(self.durations_ms)
        data["segments"] = [_slots_dict(s) for s in self.segments]
        data["cu_seqlens_q"] = list(self.cu_seqlens_q)
        data["seq_lens_k"] = list(self.seq_lens_k)
        data["block_tables"] = {rid: list(t) for rid, t in self.block_tables.items()}
        data["kv"] = _slots_dict(self.kv)
        data["admitted"] = dict(self.admitted)
        data["preempted"] = list(self.preempted)
        data["finished"] = dict(self.finished)
        data["aborted"] = list(self.aborted)
        data["sampled"] = dict(self.sampled)
        data["requests"] = {rid: _slots_dict(state) for rid, state in self.requests.items()}
        return data


_SCALAR_FIELDS = ("step", "t_start", "t_end", "policy", "token_budget", "chunked_prefill", "num_rows",
                  "padded_rows", "num_waiting", "num_running", "error", "schema_version")


def _slots_dict(obj) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__}


def upgrade_record(data: dict) -> dict:
    """A version-2 record: ``data`` itself if it already is one, else an upgraded copy."""
    if data.get("schema_version") != 1:
        return data
    return {**data, "schema_version": 2, "source": dict(V1_SOURCE)}


def validate_record(data: dict) -> None:
    """Raise ValueError naming the first field of ``data`` that breaks the schema (v1 or v2)."""
    if not isinstance(data, dict):
        raise ValueError("record: expected a JSON object")
    version = data.get("schema_version")
    if version not in SCHEMA_VERSIONS:
        raise ValueError(f"record: schema_version {version!r} is not one of {SCHEMA_VERSIONS}")
    if version == 1:
        _check_v1_durations(data)
        data = upgrade_record(data)
    missing = [name for name in IterationRecord.__annotations__ if name not in data]
    if missing:
        raise ValueError(f"record: missing field(s) {missing}")
    _check_source(data["source"])
    _check_durations(data["durations_ms"])
    _check_segments(data)
    _check_kv(data["kv"])
    for rid, state in data["requests"].items():
        if state.get("status") not in REQUEST_STATES:
            raise ValueError(f"record.requests[{rid}].status: {state.get('status')!r}")


def _check_v1_durations(data: dict) -> None:
    if set(data.get("durations_ms", ())) != set(PHASES) | {"total"}:
        raise ValueError(f"record.durations_ms: expected keys {PHASES + ('total',)}")


def _check_source(source: dict) -> None:
    if not isinstance(source, dict) or not all(isinstance(source.get(k), str) for k in ("engine", "version")):
        raise ValueError("record.source: expected {\"engine\": str, \"version\": str, \"row_order\"}")
    if source.get("row_order") not in ROW_ORDERS:
        raise ValueError(f"record.source.row_order: {source.get('row_order')!r} not in {ROW_ORDERS}")


def _check_durations(durations: dict) -> None:
    if "total" not in durations:
        raise ValueError("record.durations_ms: must contain \"total\"")
    for name, value in durations.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"record.durations_ms.{name}: {value!r} is not a non-negative number")


def _check_segments(data: dict) -> None:
    cu = [0]
    for i, seg in enumerate(data["segments"]):
        if seg.get("kind") not in SEGMENT_KINDS:
            raise ValueError(f"record.segments[{i}].kind: {seg.get('kind')!r} not in {SEGMENT_KINDS}")
        if seg["row_start"] != cu[-1]:
            raise ValueError(f"record.segments[{i}].row_start: {seg['row_start']} != {cu[-1]}")
        if seg["num_keys"] != seg["num_cached"] + seg["num_rows"]:
            raise ValueError(f"record.segments[{i}].num_keys: must be num_cached + num_rows")
        cu.append(cu[-1] + seg["num_rows"])
    if cu[-1] != data["num_rows"]:
        raise ValueError(f"record.num_rows: {data['num_rows']} != sum of segment rows {cu[-1]}")
    if data["cu_seqlens_q"] != cu:
        raise ValueError(f"record.cu_seqlens_q: {data['cu_seqlens_q']} != {cu}")
    if data["seq_lens_k"] != [seg["num_keys"] for seg in data["segments"]]:
        raise ValueError("record.seq_lens_k: must list each segment's num_keys")


def _check_kv(kv: dict) -> None:
    missing = [k for k in ("num_blocks", "block_size", "num_free", "num_cached") if not isinstance(kv.get(k), int)]
    if missing:
        raise ValueError(f"record.kv: {missing} must be integers")
    ref_counts, owners = kv.get("ref_counts"), kv.get("owners")
    if ref_counts is None and owners is None:
        return  # a large pool: counts only
    if ref_counts is None or owners is None or not len(ref_counts) == len(owners) == kv["num_blocks"]:
        raise ValueError("record.kv: ref_counts and owners need one entry per block (or both null)")
    if kv["num_free"] != ref_counts.count(0):
        raise ValueError("record.kv.num_free: must count the blocks with ref count 0")


@dataclass(slots=True)
class RequestEvent:
    kind: str  # "arrival" | "delta"
    request_id: str
    time: float
    prompt: str | None = None
    num_prompt_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)
