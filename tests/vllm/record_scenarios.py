"""Hand-made vLLM scheduler steps for the record builder's tests and the ingest's tests."""
from batchscope_vllm.records import (
    MAX_SHIPPED_BLOCKS,
    Admission,
    EngineSettings,
    KVSnapshot,
    LiveRequest,
    RecordBuilder,
    ScheduledStep,
    StepOutcome,
)

LARGE = MAX_SHIPPED_BLOCKS + 1
SETTINGS = EngineSettings(version="0.32.0", policy="vllm-fcfs", token_budget=256,
                          chunked_prefill=True, adapter="0.32")


def small_pool(num_blocks=8, owners=None) -> KVSnapshot:
    refs = [1] + [0] * (num_blocks - 1)  # block 0: vLLM's null block
    owners = owners or {}
    for block_id in owners:
        refs[block_id] = 1
    return KVSnapshot(num_blocks, 16, refs.count(0), 0, refs,
                      [owners.get(b) for b in range(num_blocks)], [])


def scheduled(rows: dict[str, tuple[int, int, int]], *, admitted=None, preempted=(),
              kv=None) -> ScheduledStep:
    """rows: request id -> (scheduled tokens, computed before, prompt tokens), scheduler order."""
    return ScheduledStep(
        t_start=100.0, schedule_ms=0.5,
        num_scheduled={rid: r[0] for rid, r in rows.items()},
        num_computed={rid: r[1] for rid, r in rows.items()},
        num_prompt_tokens={rid: r[2] for rid, r in rows.items()},
        block_tables={rid: [1 + i] for i, rid in enumerate(rows)},
        kv=kv or small_pool(), admitted=admitted or {}, preempted=list(preempted))


def outcome(order=None, *, sampled=None, finished=None, requests=None, aborted=()) -> StepOutcome:
    return StepOutcome(t_end=100.01, execute_ms=8.0, update_ms=0.5, row_order=order,
                       sampled=sampled or {}, finished=finished or {}, aborted=list(aborted),
                       requests=requests or {})


def article_step() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    step = scheduled({"C": (100, 0, 100), "A": (1, 500, 480), "B": (1, 200, 190)},
                     admitted={"C": Admission(0, 100)})
    return [builder.build(step, outcome(["A", "B", "C"], sampled={"A": 7, "B": 8, "C": 9}))]

def packed_then_fallback() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    step = scheduled({"B": (4, 0, 4), "A": (1, 9, 5)}, admitted={"B": Admission(0, 4)})
    packed = builder.build(step, outcome(["A", "idle", "B"]))
    return [packed, builder.build(step, outcome(["A"]))]  # the runner's list misses B

def chunked_prefill() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    first = builder.build(scheduled({"R": (64, 32, 200)}, admitted={"R": Admission(32, 200)}),
                          outcome(["R"], requests={"R": LiveRequest("running", 200, 96, 0)}))
    middle = builder.build(scheduled({"R": (64, 96, 200)}), outcome(["R"]))
    last = builder.build(scheduled({"R": (40, 160, 200)}),
                         outcome(["R"], sampled={"R": 5},
                                 requests={"R": LiveRequest("running", 200, 200, 1)}))
    decode = builder.build(scheduled({"R": (1, 200, 200)}), outcome(["R"], sampled={"R": 6}))
    return [first, middle, last, decode]

def preempt_and_resume() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    builder.build(scheduled({"R": (10, 0, 10)}, admitted={"R": Admission(0, 10)}), outcome(["R"]))
    preempted = builder.build(scheduled({}, preempted=["R"]),
                              outcome([], requests={"R": LiveRequest("preempted", 10, 0, 3)}))
    resumed = builder.build(scheduled({"R": (13, 0, 10)}, admitted={"R": Admission(0, 13)}),
                            outcome(["R"], requests={"R": LiveRequest("running", 10, 13, 3)}))
    return [preempted, resumed]

def finish_and_abort() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    builder.build(scheduled({"R": (4, 0, 4)}, admitted={"R": Admission(0, 4)}), outcome(["R"]))
    record = builder.build(
        scheduled({"R": (1, 4, 4)}),
        outcome(["R"], sampled={"R": 2}, finished={"R": "stop", "X": "abort"}, aborted=["X"],
                requests={"R": LiveRequest("finished", 4, 5, 2),
                          "X": LiveRequest("finished", 3, 0, 0)}))
    return [record]

def large_pool() -> list[dict]:
    kv = KVSnapshot(LARGE, 16, LARGE - 3, 5, None, None, None)
    return [RecordBuilder(SETTINGS).build(scheduled({"R": (4, 0, 4)}, kv=kv), outcome(["R"]))]


SCENARIOS = (article_step, packed_then_fallback, chunked_prefill, preempt_and_resume,
             finish_and_abort, large_pool)


def prefills(request_ids: list[str], *, num_tokens: int = 4) -> dict:
    """One step that prefills each of ``request_ids`` whole (``num_tokens`` each) and samples a
    token for each: ids as vLLM's engine core names them."""
    builder = RecordBuilder(SETTINGS)
    rows = {rid: (num_tokens, 0, num_tokens) for rid in request_ids}
    step = scheduled(rows, admitted={rid: Admission(0, num_tokens) for rid in request_ids},
                     kv=small_pool(owners={1 + i: rid for i, rid in enumerate(request_ids)}))
    live = {rid: LiveRequest("running", num_tokens, num_tokens, 1) for rid in request_ids}
    return builder.build(step, outcome(list(request_ids), sampled=dict.fromkeys(request_ids, 7),
                                       requests=live))
