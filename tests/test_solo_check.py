"""The solo check (AsyncLLM.solo_check): a finished request re-run alone on the same engine,
compared token by token with how it ran batched."""
from __future__ import annotations

import pytest
from kernels_here import needs_kernels

from engine import AsyncLLM, RequestOutput, SamplingParams
from engine.solo_check import Difference, Run, compare

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True, logprobs=0)


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    llm = AsyncLLM(tiny_model_dir, device="cpu", dtype="float32", max_model_len=256, num_kv_blocks=64,
                   max_num_batched_tokens=32)
    llm.wait_ready(120)
    yield llm
    llm.shutdown()


def batched(llm: AsyncLLM, prompts: list[list[int]], params: SamplingParams, tag: str) -> list[RequestOutput]:
    streams = [llm.add_request(llm.prepare(p, params), request_id=f"{tag}{i}") for i, p in enumerate(prompts)]
    return [s.collect() for s in streams]


def test_batched_requests_are_reported_against_their_solo_runs(llm):
    prompts = [[(7 * i + 3 * j) % 900 + 5 for j in range(n)] for i, n in enumerate([3, 40, 9, 70, 17, 5])]
    outputs = batched(llm, prompts, GREEDY, "batched")
    for out in outputs:
        report = llm.solo_check(out.request_id)
        d = report.difference
        assert report.alone and report.batch_invariant is False
        assert report.solo_request_id.startswith(f"{out.request_id}-solo")
        assert report.same == (d.first_difference is None) and d.num_compared <= len(out.token_ids)
        if report.same:
            assert d.max_abs_difference == 0 and report.summary.startswith("same as alone")
        else:
            assert report.summary.startswith(f"first differs at token {d.first_difference}")
        assert report.to_dict()["summary"] == report.summary
        print(out.request_id, len(prompts[outputs.index(out)]), report.summary, d)


@needs_kernels  # (batch invariance needs them)
def test_with_batch_invariance_switched_on_every_batched_request_is_the_same_as_alone(llm):
    llm.reconfigure(batch_invariant=True)  # a presenter's switch, from the next step
    try:
        prompts = [[(5 * i + 2 * j) % 900 + 5 for j in range(n)] for i, n in enumerate([3, 40, 9, 70, 17, 5])]
        for out in batched(llm, prompts, GREEDY, "invariant"):
            report = llm.solo_check(out.request_id)
            assert report.batch_invariant and report.same, report.summary
            assert report.summary == "same as alone (batch invariance on)"
    finally:
        llm.reconfigure(batch_invariant=False)


def test_a_request_that_ran_alone_is_the_same_as_alone(llm):
    out = batched(llm, [[11, 12, 13, 14, 15]], GREEDY, "lonely")[0]
    report = llm.solo_check(out.request_id, solo_request_id="my-solo")
    assert report.same and report.alone and report.solo_request_id == "my-solo"
    assert report.difference == Difference(None, None, 0.0, len(out.token_ids))
    assert report.summary == "same as alone (batch invariance off)"


def test_a_seeded_sampled_request_can_be_checked(llm):
    params = SamplingParams(max_tokens=6, temperature=0.8, seed=5, ignore_eos=True, logprobs=2)
    out = batched(llm, [[21, 22, 23], [31, 32, 33, 34]], params, "seeded")[0]
    assert llm.solo_check(out.request_id).difference.num_compared > 0


def test_requests_the_check_cannot_compare_get_a_clear_error(llm):
    with pytest.raises(LookupError, match="not among the last"):
        llm.solo_check("nobody")
    batched(llm, [[5, 6, 7]], SamplingParams(max_tokens=2, temperature=0), "no-logprobs")
    with pytest.raises(LookupError, match="no-logprobs0"):
        llm.solo_check("no-logprobs0")
    batched(llm, [[5, 6, 7]], SamplingParams(max_tokens=2, temperature=0.7, logprobs=0), "unseeded")
    with pytest.raises(ValueError, match="greedy or seeded"):
        llm.solo_check("unseeded0")


def run(tokens: list[int], logprobs: list[dict[int, float]]) -> Run:
    return Run((1, 2), GREEDY, tokens, logprobs)


def output(tokens: list[int], logprobs: list[dict[int, float]]) -> RequestOutput:
    return RequestOutput("solo", [1, 2], tokens, logprobs=logprobs)


@pytest.mark.parametrize("solo_tokens, solo_logprobs, expected", [
    ([4, 5, 6], [{4: -1.0}, {5: -2.0}, {6: -3.0}], Difference(None, None, 0.0, 3)),
    ([4, 5, 6], [{4: -1.0}, {5: -2.5}, {6: -3.0}], Difference(1, None, 0.5, 3)),
    ([4, 5, 7], [{4: -1.0}, {5: -2.0}, {7: -0.5}], Difference(2, 2, 0.0, 3)),
    ([4, 5], [{4: -1.0}, {5: -2.0}], Difference(2, 2, 0.0, 2)),
])
def test_compare_finds_the_first_difference(solo_tokens, solo_logprobs, expected):
    original = run([4, 5, 6], [{4: -1.0}, {5: -2.0}, {6: -3.0}])
    assert compare(original, output(solo_tokens, solo_logprobs)) == expected
