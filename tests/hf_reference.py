"""Greedy reference outputs from transformers and a token-by-token comparison with near-ties."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

NEAR_TIE = 1e-3


@dataclass
class Comparison:
    exact: int = 0
    near_ties: list[tuple[int, int, float]] = field(default_factory=list)  # (prompt, position, margin)
    mismatches: list[str] = field(default_factory=list)

    def assert_ok(self) -> None:
        assert not self.mismatches, "\n".join(self.mismatches)


def load_hf(model_dir: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@torch.inference_mode()
def hf_greedy(hf, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    refs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                          do_sample=False, eos_token_id=None, pad_token_id=0)
        refs.append(out[0, len(prompt):].tolist())
    return refs


@torch.inference_mode()
def compare(hf, prompts, refs, outputs) -> Comparison:
    """Equal token by token, except where transformers itself is at a near-tie (< 1e-3)."""
    result = Comparison()
    for n, (prompt, ref, out) in enumerate(zip(prompts, refs, outputs)):
        got = out.token_ids
        if got == ref:
            result.exact += 1
            continue
        i = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
        if i >= min(len(ref), len(got)):
            result.mismatches.append(f"prompt {n}: lengths differ {len(ref)} vs {len(got)}")
            continue
        logits = hf(torch.tensor([prompt + ref[:i]])).logits[0, -1]
        top = logits.topk(2).values
        margin = float(top[0] - top[1])
        if margin < NEAR_TIE:
            result.near_ties.append((n, i, margin))
        else:
            result.mismatches.append(
                f"prompt {n} (len {len(prompt)}): token {i} is {got[i]}, transformers {ref[i]} "
                f"(top-2 margin {margin:.4g})"
            )
    return result
