"""vLLM 0.34: two reads change.

- ``ModelRunnerOutput.req_id_to_index`` is gone: a request's row in the per-request output lists
  is its position in ``req_ids`` (the V2 runner's batch order: decodes, short extends,
  prefills; 0.34 has no V1 runner).
- ``CachedRequestData.resumed_req_ids`` (and ``all_token_ids``) are gone: a request resumed
  after a preemption comes in ``scheduled_new_reqs`` again, with its full block ids and its
  prefix-cache hit as ``num_computed_tokens``, so it is admitted like a new one.

(Also new and not read: ``Request.prompt_token_ids`` is a TokenBuffer, ``NewRequestData.
prefill_token_ids`` is required, ``KVCacheBlock.block_hash`` is a plain field where it was a
property, ``BlockHashToBlockMap`` holds block ids; its ``len`` still counts cached entries.)
"""
from . import v0_33


class Adapter(v0_33.Adapter):
    RELEASE = (0, 34)

    def resumed(self, cached) -> tuple[str, ...]:
        return ()

    @staticmethod
    def output_index(model_output) -> dict[str, int]:
        return {rid: i for i, rid in enumerate(getattr(model_output, "req_ids", None) or ())}
