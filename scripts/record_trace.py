"""Record the demo trace shipped in assets/traces/ (or any model's, for a GPU Space).

    python -m scripts.record_trace [--model default] [--out assets/traces/NAME.jsonl.gz]

One engine with a small token budget and a small KV pool runs three workloads, one after the
other, through AsyncLLM (the dashboard's path, so request events are recorded too):

1. chunked prefill: a long prompt arrives while two short requests decode; the 64-token
   budget splits it into chunks that share steps with the decodes;
2. prefix caching: four questions share one long system prompt; the first computes it, the
   next three are admitted with its blocks as a prefix-cache hit;
3. preemption: six long generations outgrow the KV pool, so the newest is preempted and
   later recomputed.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine import AsyncLLM, SamplingParams
from viz.traces.trace import TraceWriter, load_trace, make_header

ENGINE_CONFIG = dict(max_num_batched_tokens=64, num_kv_blocks=48, block_size=16, seed=0)
SYSTEM_PROMPT = (
    "You are a concise assistant for a talk about LLM serving. Answer in two or three plain "
    "sentences for an audience of software engineers. Prefer concrete numbers and short "
    "examples over general statements, avoid marketing language, and say so when a question "
    "has no single answer. Continuous batching lets an inference server add and remove "
    "requests between iterations instead of waiting for a whole batch to finish, and a paged "
    "KV cache stores each request's keys and values in fixed-size blocks."
)
LONG_DOCUMENT = " ".join(
    f"Section {i}: the scheduler gives every running request one decode token per step, then "
    f"spends the rest of the token budget on prompt chunks of waiting requests."
    for i in range(1, 13)
)


def chat(tokenizer, user: str, system: str | None = None) -> str:
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def params(max_tokens: int, seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=seed, ignore_eos=True)


def first_token(stream) -> None:
    next(iter(stream))


def run_workloads(llm: AsyncLLM) -> None:
    tok = llm.tokenizer
    # 1. chunked prefill next to running decodes
    short = [llm.add_request(chat(tok, q), params(48, i)) for i, q in enumerate(
        ["What is a KV cache?", "Why batch requests on a GPU?"])]
    first_token(short[0])
    long = llm.add_request(chat(tok, "Summarise this in one sentence:\n" + LONG_DOCUMENT),
                           params(24, 2))
    for stream in (*short, long):
        stream.collect()
    # 2. prefix caching: a shared system prompt
    questions = ["What does TTFT measure?", "What is inter-token latency?",
                 "What is chunked prefill?", "Why cache prompt prefixes?"]
    leader = llm.add_request(chat(tok, questions[0], SYSTEM_PROMPT), params(32, 3))
    first_token(leader)
    followers = [llm.add_request(chat(tok, q, SYSTEM_PROMPT), params(32, 4 + i))
                 for i, q in enumerate(questions[1:])]
    for stream in (leader, *followers):
        stream.collect()
    # 3. preemption: more growth than the pool holds
    stories = [llm.add_request(chat(tok, f"Tell a short story about server number {i}."),
                               params(150, 10 + i)) for i in range(6)]
    for stream in stories:
        stream.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--out", help="default: assets/traces/<model>-<device>.jsonl.gz")
    parser.add_argument("--text", choices=("full", "redacted"), default="full")
    args = parser.parse_args()
    llm = AsyncLLM(args.model, **ENGINE_CONFIG)
    llm.wait_ready(600)
    header = make_header(llm.info(), args.text)
    device = header["hardware"]["device"]
    out = args.out or f"assets/traces/{llm.model_info.name.lower()}-{device}.jsonl.gz"
    started = time.perf_counter()
    with TraceWriter(out, header).attach(llm):
        run_workloads(llm)
    llm.shutdown()
    trace = load_trace(out)
    records = trace.records
    print(f"{out}: {len(records)} iterations, {len(trace.events)} events, "
          f"{Path(out).stat().st_size / 1024:.0f} KiB, recorded in "
          f"{time.perf_counter() - started:.0f} s; "
          f"preemptions {sum(len(r['preempted']) for r in records)}, "
          f"prefix-hit tokens {sum(sum(r['admitted'].values()) for r in records)}, "
          f"prefill chunks {sum(s['kind'] == 'prefill_chunk' for r in records for s in r['segments'])}")


if __name__ == "__main__":
    main()
