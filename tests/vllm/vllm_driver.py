"""Runs in .venv-vllm for the integration test: one offline vLLM run of a Llama model
(argv: model directory, tensor parallel size) with the plugin on (BATCHSCOPE_INGEST in the
environment), a small token budget so prefills are chunked and packed with decodes, the audit
scheduler and the audit worker (the rows each step really packed). Prints ``OUTPUTS <json>``
once generation is done, then waits for a line on stdin (the test has all records) before
exiting: the engine-core process is killed at shutdown, so the sender must have flushed by
then."""
import json
import sys

# A system text long enough (~150 tokens) that its first request needs several steps of the
# 64-token budget: the second one is admitted in a later step and hits the prefix cache.
SHARED = ("You are a careful assistant for people who run language models in production. "
          "Answer in one short sentence, plainly, without lists or headings, and say so when "
          "you are not sure. The user asks about continuous batching in LLM serving engines, "
          "where the prompts of new requests are prefilled in the same forward pass as the "
          "decode steps of running requests, the key and value cache is paged into fixed-size "
          "blocks that a block table maps per request, and a scheduler decides at every step "
          "how many tokens each request may add within a token budget. ")
PROMPTS = ["Hello, my name is", SHARED + "What is a prefill?", SHARED + "What is a decode?",
           "The capital of France is Paris. The capital of Italy is"]
MAX_TOKENS = 12


def main() -> None:
    from vllm import LLM, SamplingParams

    model, tensor_parallel = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    llm = LLM(model=model, hf_overrides={"architectures": ["LlamaForCausalLM"]},
              tensor_parallel_size=tensor_parallel,
              dtype="float32", enforce_eager=True, seed=0, block_size=32,
              max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512,
              scheduler_cls="audit_scheduler.AuditScheduler", worker_cls="audit_worker.AuditWorker")
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    result = [{"prompt_token_ids": list(o.prompt_token_ids),
               "token_ids": list(o.outputs[0].token_ids)} for o in outputs]
    print("OUTPUTS " + json.dumps(result), flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
