"""Hand-made steps of a vLLM engine run with ``--data-parallel-size N``: each rank has its own
scheduler, so its own RecordBuilder (its own step numbers and KV pool) and its own connection to
the ingest, whose hello names the rank (the plugin's ``_attach``)."""
from batchscope_vllm.records import EngineSettings, LiveRequest, RecordBuilder, StepOutcome
from record_scenarios import scheduled, small_pool

PHASES = ["schedule", "execute", "update"]
PROMPT = 8  # prompt tokens of every request here


def rank_hello(rank: int, token: str, *, size: int | None = 2, model: str = "SmolLM2", version: str = "0.32.0",
               trace_header: dict | None = None) -> dict:
    """The hello of data-parallel ``rank`` of a vLLM engine of ``size`` ranks."""
    header = trace_header or {}
    engine = {**header.get("engine", {}), "data_parallel_rank": rank}
    if size is not None:
        engine["data_parallel_size"] = size
    return {"type": "hello", "protocol": 1, "token": token,
            "engine": {"name": "vllm", "version": version, "pid": 1000 + rank, "data_parallel_rank": rank},
            "info": {"model": model, "block_size": 16, "num_kv_blocks": 8, "max_model_len": 512,
                     "phases": PHASES, "trace_header": {**header, "engine": engine}}}


class RankSteps:
    """The steps of one rank: its ``running`` requests decode a token each step, its ``waiting``
    ones wait; ``empty()`` is a step that schedules nothing, after they all finished."""

    def __init__(self, rank: int, running: list[str], waiting: list[str] = ()) -> None:
        self.rank, self.running, self.waiting = rank, list(running), list(waiting)
        self.builder = RecordBuilder(EngineSettings(version="0.32.0", policy="vllm-fcfs", token_budget=256,
                                                    chunked_prefill=True, data_parallel_rank=rank))
        self.done = 0  # tokens each running request has generated

    def step(self) -> dict:
        rows = {rid: (1, PROMPT + self.done, PROMPT) for rid in self.running}
        pool = small_pool(owners={1 + i: rid for i, rid in enumerate(self.running)})
        self.done += 1
        live = {rid: LiveRequest("running", PROMPT, PROMPT + self.done, self.done) for rid in self.running}
        live |= {rid: LiveRequest("waiting", PROMPT, 0, 0) for rid in self.waiting}
        return self.builder.build(scheduled(rows, kv=pool), self._outcome(live, sampled=dict.fromkeys(self.running, 7)))

    def empty(self) -> dict:
        """The step vLLM runs after its requests finished: no tokens, all blocks free again."""
        finished = dict.fromkeys(self.running, "length")
        live = {rid: LiveRequest("finished", PROMPT, PROMPT + self.done, self.done) for rid in self.running}
        self.running = []
        return self.builder.build(scheduled({}, kv=small_pool()), self._outcome(live, finished=finished))

    def _outcome(self, requests: dict, *, sampled=None, finished=None) -> StepOutcome:
        return StepOutcome(t_end=100.01, execute_ms=8.0, update_ms=0.5, row_order=list(self.running),
                           sampled=sampled or {}, finished=finished or {}, aborted=[], requests=requests)
