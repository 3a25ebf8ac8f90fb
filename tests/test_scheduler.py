"""The scheduler's decisions on hand-made states: no model, a small KV pool, requests built
directly, and steps played by ``run_step`` the way the engine would (tokens computed as
scheduled, a token sampled when a request reaches its end)."""
from __future__ import annotations

import itertools

from engine.block_manager import BlockManager
from engine.config import EngineConfig, StepSettings
from engine.request import Request, RequestStatus
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput

BLOCK = 4  # tokens per KV block
_first_token = itertools.count(100, 1000)  # each prompt its own token ids: no accidental prefix hits


def make_scheduler(budget: int = 64, blocks: int = 64, policy: str = "mixed", chunked: bool = True,
                   prefix_caching: bool = False) -> SteppedScheduler:
    config = EngineConfig(block_size=BLOCK, num_kv_blocks=blocks, max_num_batched_tokens=budget,
                          policy=policy, enable_chunked_prefill=chunked,
                          enable_prefix_caching=prefix_caching)
    return SteppedScheduler(config.step_settings, BlockManager(blocks, BLOCK, prefix_caching), config.max_num_seqs)


class SteppedScheduler(Scheduler):
    """A scheduler with the settings the engine would hand each of its steps (``run_step``)."""

    def __init__(self, settings: StepSettings, *args) -> None:
        super().__init__(*args)
        self.settings = settings


def arrive(scheduler: Scheduler, request_id: str, prompt_len: int = 0,
           tokens: list[int] | None = None) -> Request:
    """A request with a fresh prompt of ``prompt_len`` tokens (or ``tokens``), queued."""
    if tokens is None:
        first = next(_first_token)
        tokens = list(range(first, first + prompt_len))
    request = Request(request_id, tokens, SamplingParams(max_tokens=100), detokenizer=None,
                      eos_token_ids=frozenset())
    scheduler.add(request)
    return request


def run_step(scheduler: Scheduler) -> SchedulerOutput:
    """Schedule one step and apply it as the engine does, sampling token 7 where due."""
    out = scheduler.schedule(scheduler.settings)
    for item in out.scheduled:
        samples = item.completes_prefill
        item.request.num_computed_tokens += item.num_new_tokens
        scheduler.block_manager.cache_full_blocks(item.request)
        if samples:
            item.request.output_token_ids.append(7)
    return out


def plan(out: SchedulerOutput) -> list[tuple[str, str, int]]:
    """The step as (request id, kind, tokens), in the order the scheduler packed it."""
    return [(item.request.request_id, item.kind, item.num_new_tokens) for item in out.scheduled]


# ---- token budget ------------------------------------------------------------------------------
def test_a_step_never_exceeds_the_token_budget():
    scheduler = make_scheduler(budget=8)
    for name in "ABC":
        arrive(scheduler, name, 5)
    first = run_step(scheduler)
    assert plan(first) == [("A", "prefill", 5), ("B", "prefill_chunk", 3)]
    assert [r.request_id for r in scheduler.waiting] == ["C"]
    second = run_step(scheduler)  # A decodes, B finishes its prompt, C fits the 5 left
    assert plan(second) == [("A", "decode", 1), ("B", "prefill_chunk", 2), ("C", "prefill", 5)]
    assert sum(n for *_, n in plan(second)) == 8


def test_decodes_come_first_and_a_new_prompt_takes_the_rest_of_the_budget():
    scheduler = make_scheduler(budget=16)
    arrive(scheduler, "A", 3)
    arrive(scheduler, "B", 3)
    run_step(scheduler)
    arrive(scheduler, "C", 40)
    assert plan(run_step(scheduler)) == [("A", "decode", 1), ("B", "decode", 1), ("C", "prefill_chunk", 14)]


# ---- chunked prefill ---------------------------------------------------------------------------
def test_chunked_prefill_spreads_a_long_prompt_over_steps_then_decodes():
    scheduler = make_scheduler(budget=16)
    prompt = arrive(scheduler, "long", 40)
    steps = [plan(run_step(scheduler)) for _ in range(4)]
    assert steps == [[("long", "prefill_chunk", 16)], [("long", "prefill_chunk", 16)],
                     [("long", "prefill_chunk", 8)], [("long", "decode", 1)]]
    assert prompt.output_token_ids == [7, 7]  # sampled once the prompt was complete, then decoded


def test_without_chunking_a_prompt_waits_for_a_step_with_room_for_all_of_it():
    scheduler = make_scheduler(budget=10, chunked=False)
    arrive(scheduler, "A", 6)
    arrive(scheduler, "B", 6)
    assert plan(run_step(scheduler)) == [("A", "prefill", 6)]  # B's 6 do not fit the 4 left
    assert plan(run_step(scheduler)) == [("A", "decode", 1), ("B", "prefill", 6)]


# ---- preemption --------------------------------------------------------------------------------
def test_when_blocks_run_out_the_newest_running_request_is_preempted():
    scheduler = make_scheduler(blocks=4)
    a, b, c = (arrive(scheduler, name, BLOCK) for name in "ABC")  # one full block each
    run_step(scheduler)
    late = arrive(scheduler, "D", 2)
    out = run_step(scheduler)  # each decode needs a second block: one is free, then C's
    assert out.preempted == ["C"]
    assert plan(out) == [("A", "decode", 1), ("B", "decode", 1)]
    assert out.admitted == {}  # the pool is short: no new work this step
    assert list(scheduler.waiting) == [c, late]  # C goes back ahead of later arrivals
    assert (c.status, c.num_computed_tokens, c.num_preemptions, c.block_ids) == (
        RequestStatus.PREEMPTED, 0, 1, [])
    assert scheduler.running == [a, b]
    scheduler.block_manager.check_invariants(scheduler.running)


def test_a_preempted_request_recomputes_its_prompt_and_output_when_readmitted():
    scheduler = make_scheduler(blocks=4)
    for name in "ABC":
        arrive(scheduler, name, BLOCK)
    run_step(scheduler)
    run_step(scheduler)  # C preempted, holding 4 prompt tokens and 1 sampled
    for name in "AB":
        scheduler.finish(next(r for r in scheduler.running if r.request_id == name), "stop")
    out = run_step(scheduler)
    assert out.admitted == {"C": 0} and plan(out) == [("C", "prefill", BLOCK + 1)]


# ---- policies ----------------------------------------------------------------------------------
def test_mixed_policy_runs_decodes_alongside_a_new_prompt():
    scheduler = make_scheduler(policy="mixed")
    arrive(scheduler, "A", 3)
    run_step(scheduler)
    arrive(scheduler, "B", 5)
    assert plan(run_step(scheduler)) == [("A", "decode", 1), ("B", "prefill", 5)]


def test_prefill_first_stalls_decodes_while_a_prompt_can_be_scheduled():
    scheduler = make_scheduler(policy="prefill_first")
    arrive(scheduler, "A", 3)
    run_step(scheduler)
    arrive(scheduler, "B", 5)
    assert plan(run_step(scheduler)) == [("B", "prefill", 5)]  # A's decode waits
    assert plan(run_step(scheduler)) == [("A", "decode", 1), ("B", "decode", 1)]


def test_prefill_first_finishes_a_chunked_prompt_before_any_decode():
    scheduler = make_scheduler(budget=8, policy="prefill_first")
    arrive(scheduler, "A", 3)
    run_step(scheduler)
    arrive(scheduler, "B", 12)
    assert plan(run_step(scheduler)) == [("B", "prefill_chunk", 8)]
    assert plan(run_step(scheduler)) == [("B", "prefill_chunk", 4)]
    assert plan(run_step(scheduler)) == [("A", "decode", 1), ("B", "decode", 1)]


# ---- prefix cache ------------------------------------------------------------------------------
SYSTEM = list(range(1, 2 * BLOCK + 1))  # two full blocks both prompts start with


def test_a_prefix_cache_hit_leaves_only_the_rest_of_the_prompt_to_compute():
    scheduler = make_scheduler(prefix_caching=True)
    first = arrive(scheduler, "first", tokens=SYSTEM + [50, 51])
    run_step(scheduler)
    second = arrive(scheduler, "second", tokens=SYSTEM + [60, 61])
    out = run_step(scheduler)
    assert out.admitted == {"second": len(SYSTEM)}
    assert ("second", "prefill", 2) in plan(out)
    assert second.block_ids[:2] == first.block_ids[:2]  # the shared blocks, not copies


def test_without_prefix_caching_the_same_prefix_is_computed_again():
    scheduler = make_scheduler(prefix_caching=False)
    arrive(scheduler, "first", tokens=SYSTEM + [50, 51])
    run_step(scheduler)
    arrive(scheduler, "second", tokens=SYSTEM + [60, 61])
    out = run_step(scheduler)
    assert out.admitted == {"second": 0} and ("second", "prefill", len(SYSTEM) + 2) in plan(out)


def test_a_fully_cached_prompt_still_computes_its_last_block():
    """A token must be sampled, so the last block is computed even though it is cached."""
    scheduler = make_scheduler(prefix_caching=True)
    arrive(scheduler, "first", tokens=list(SYSTEM))
    run_step(scheduler)
    arrive(scheduler, "again", tokens=list(SYSTEM))
    out = run_step(scheduler)
    assert out.admitted == {"again": BLOCK} and ("again", "prefill", BLOCK) in plan(out)
