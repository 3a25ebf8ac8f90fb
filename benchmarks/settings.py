"""Benchmark settings: how big each workload is and how often it is repeated."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    repeats: int  # measured runs per peer and workload, one round over all peers each (best one reported)
    token_budget: int  # Batchscope max_num_batched_tokens (chunk size) and generate_batch's max_batch_tokens
    max_num_seqs: int  # running requests at most (Batchscope) / requests per batch (generate_batch)
    hf_batch_size: int  # requests per padded static batch (transformers generate)
    # W1: many requests at once; prompt and output lengths spread uniformly over ranges.
    w1_requests: int
    w1_prompt_min: int
    w1_prompt_max: int
    w1_out_min: int
    w1_out_max: int
    # W2: steady decoders; a long prompt arrives once each has produced w2_arrive_after tokens.
    w2_decoders: int
    w2_decoder_prompt: int
    w2_decode_tokens: int
    w2_long_prompt: int
    w2_arrive_after: int
    w2_long_max_tokens: int
    # W3: requests sharing one long system prompt, each with its own short suffix.
    w3_requests: int
    w3_system_prompt: int
    w3_suffix_min: int
    w3_suffix_max: int
    w3_max_tokens: int
    telemetry_rounds: int  # alternating bare / subscribed W1 runs for the telemetry cost

    @property
    def max_model_len(self) -> int:
        """The longest request of any workload (prompt + output): the engine's ``max_model_len``,
        as a user serving these requests would set it (its default caps at 4096)."""
        return max(
            self.w1_prompt_max + self.w1_out_max,
            self.w2_decoder_prompt + self.w2_decode_tokens,
            self.w2_long_prompt + self.w2_long_max_tokens,
            self.w3_system_prompt + self.w3_suffix_max + self.w3_max_tokens,
        )

    def to_dict(self) -> dict:
        return asdict(self) | {"max_model_len": self.max_model_len}


SMALL = Setting(
    name="small", repeats=1, token_budget=256, max_num_seqs=64, hf_batch_size=16,
    w1_requests=8, w1_prompt_min=16, w1_prompt_max=256, w1_out_min=8, w1_out_max=32,
    w2_decoders=4, w2_decoder_prompt=32, w2_decode_tokens=24, w2_long_prompt=1024,
    w2_arrive_after=4, w2_long_max_tokens=4,
    w3_requests=8, w3_system_prompt=256, w3_suffix_min=8, w3_suffix_max=32, w3_max_tokens=8,
    telemetry_rounds=3,
)

FULL = Setting(
    name="full", repeats=1, token_budget=256, max_num_seqs=64, hf_batch_size=16,
    w1_requests=24, w1_prompt_min=16, w1_prompt_max=384, w1_out_min=16, w1_out_max=64,
    w2_decoders=8, w2_decoder_prompt=64, w2_decode_tokens=48, w2_long_prompt=1024,
    w2_arrive_after=8, w2_long_max_tokens=8,
    w3_requests=16, w3_system_prompt=512, w3_suffix_min=16, w3_suffix_max=64, w3_max_tokens=16,
    telemetry_rounds=5,
)

# A tiny setting for tests and dry runs: every code path, seconds of work.
TINY = Setting(
    name="tiny", repeats=1, token_budget=64, max_num_seqs=16, hf_batch_size=4,
    w1_requests=4, w1_prompt_min=4, w1_prompt_max=48, w1_out_min=2, w1_out_max=6,
    w2_decoders=2, w2_decoder_prompt=8, w2_decode_tokens=8, w2_long_prompt=96,
    w2_arrive_after=2, w2_long_max_tokens=2,
    w3_requests=4, w3_system_prompt=64, w3_suffix_min=4, w3_suffix_max=8, w3_max_tokens=4,
    telemetry_rounds=1,
)

# benchmarks/gpu_check.py on one GPU: 256 concurrent requests, a Qwen2.5-0.5B-sized model.
GPU = Setting(
    name="gpu", repeats=1, token_budget=2048, max_num_seqs=256, hf_batch_size=64,
    w1_requests=256, w1_prompt_min=32, w1_prompt_max=512, w1_out_min=32, w1_out_max=256,
    w2_decoders=32, w2_decoder_prompt=128, w2_decode_tokens=96, w2_long_prompt=4096,
    w2_arrive_after=16, w2_long_max_tokens=8,
    w3_requests=64, w3_system_prompt=1024, w3_suffix_min=16, w3_suffix_max=64, w3_max_tokens=32,
    telemetry_rounds=1,
)

SETTINGS = {s.name: s for s in (TINY, SMALL, FULL, GPU)}
