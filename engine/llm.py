"""LLM: the offline front. Submit a list of prompts, step until all are done."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .config import EngineConfig
from .llm_engine import LLMEngine, Prompt
from .outputs import RequestOutput
from .request import Request
from .sampling_params import SamplingParams
from .telemetry import IterationRecord


class LLM:
    def __init__(self, model: str = "default", **config):
        self.engine = LLMEngine(model, EngineConfig.from_kwargs(**config))

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        on_iteration: Callable[[IterationRecord], None] | None = None,
    ) -> list[RequestOutput]:
        """Run all prompts together (continuous batching); outputs in input order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(
                    f"sampling_params: got {len(params)} for {len(prompts)} prompts"
                )
        # Validate everything first so a bad prompt never leaves half a batch queued.
        requests = [self.engine.make_request(p, sp) for p, sp in zip(prompts, params, strict=True)]
        outputs = {r.request_id: _output(r) for r in requests}
        for request in requests:
            self.engine.add(request)
        while self.engine.has_unfinished:
            result = self.engine.step()
            for delta in result.deltas:
                out = outputs.get(delta.request_id)
                if out is None:
                    continue
                out.add(delta)
                if delta.finished:
                    out.finish_time = time.time()
            if on_iteration is not None:
                on_iteration(result.record)
        for request in requests:
            out = outputs[request.request_id]
            out.first_token_time = request.first_token_time
            out.num_cached_tokens = request.num_cached_tokens
            out.num_preemptions = request.num_preemptions
        return [outputs[r.request_id] for r in requests]


def _output(request: Request) -> RequestOutput:
    return RequestOutput(
        request_id=request.request_id,
        prompt_token_ids=list(request.prompt_token_ids),
        arrival_time=request.arrival_time,
        logprobs=[] if request.sampling_params.logprobs is not None else None,
    )
