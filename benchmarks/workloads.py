"""Seeded workloads W1-W3: token-id prompts, so every peer sees exactly the same tokens.

Prompts are random ids from the ordinary part of the vocabulary (no special tokens); with
``ignore_eos`` every request generates exactly ``max_tokens`` tokens, so peers do the same work.
Each run of a workload (warm-up, repeat 0, 1, ...) gets its own seed: a fresh prompt set keeps
a prefix cache from carrying hits from one run into the next.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .settings import Setting

WORKLOADS = ("W1", "W2", "W3")
FIRST_ORDINARY_TOKEN = 100  # SmolLM2/Qwen put their special tokens below this
WARMUP_SEED = 1000  # the unmeasured warm-up run of every peer


@dataclass(frozen=True)
class RequestSpec:
    prompt: list[int]
    max_tokens: int
    # Submitted once every earlier-submitted request has produced this many tokens (0: at start).
    after_tokens: int = 0


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    requests: list[RequestSpec]

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    @property
    def num_output_tokens(self) -> int:
        return sum(r.max_tokens for r in self.requests)

    @property
    def max_len(self) -> int:
        return max(len(r.prompt) + r.max_tokens for r in self.requests)


def build(name: str, setting: Setting, seed: int, vocab_size: int) -> Workload:
    rng = random.Random(f"{name}:{seed}")

    def tokens(n: int) -> list[int]:
        return [rng.randrange(FIRST_ORDINARY_TOKEN, vocab_size) for _ in range(n)]

    s = setting
    if name == "W1":
        requests = [
            RequestSpec(tokens(rng.randint(s.w1_prompt_min, s.w1_prompt_max)), rng.randint(s.w1_out_min, s.w1_out_max))
            for _ in range(s.w1_requests)
        ]
        text = (f"{s.w1_requests} requests at once, prompts {s.w1_prompt_min}-{s.w1_prompt_max} tokens, "
                f"{s.w1_out_min}-{s.w1_out_max} out")
    elif name == "W2":
        requests = [RequestSpec(tokens(s.w2_decoder_prompt), s.w2_decode_tokens) for _ in range(s.w2_decoders)]
        requests.append(RequestSpec(tokens(s.w2_long_prompt), s.w2_long_max_tokens, s.w2_arrive_after))
        text = (f"{s.w2_decoders} decoders x {s.w2_decode_tokens} tokens; a {s.w2_long_prompt}-token prompt "
                f"arrives after {s.w2_arrive_after} tokens each")
    elif name == "W3":
        system = tokens(s.w3_system_prompt)
        requests = [
            RequestSpec(system + tokens(rng.randint(s.w3_suffix_min, s.w3_suffix_max)), s.w3_max_tokens)
            for _ in range(s.w3_requests)
        ]
        text = (f"{s.w3_requests} requests sharing a {s.w3_system_prompt}-token system prompt "
                f"+ {s.w3_suffix_min}-{s.w3_suffix_max} own tokens, {s.w3_max_tokens} out")
    else:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {name!r}")
    return Workload(name, text, requests)
