"""Loaded by vLLM in the engine-core process (``scheduler_cls``) in the integration test: a
plain vLLM Scheduler that also writes, per step, what it told the workers: scheduled tokens
per request and each request's block table rebuilt from the block ids in the SchedulerOutput
(new requests' tables, appended or replaced ids of cached ones). The test holds the plugin's
records against this independent account. Runs in .venv-vllm only."""
import json
import os

from vllm.v1.core.sched.scheduler import Scheduler


class AuditScheduler(Scheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tables: dict[str, list[int]] = {}
        # one file for the engine's lifetime
        self._audit = open(os.environ["BATCHSCOPE_AUDIT"], "a")  # noqa: SIM115

    def schedule(self, *args, **kwargs):
        output = super().schedule(*args, **kwargs)
        for rid in set(output.finished_req_ids) | set(output.preempted_req_ids or ()):
            self._tables.pop(rid, None)
        for new in output.scheduled_new_reqs:
            self._tables[new.req_id] = list(new.block_ids[0])
        cached = output.scheduled_cached_reqs
        for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
            if rid in cached.resumed_req_ids:
                self._tables[rid] = list(ids[0]) if ids else []
            elif ids:
                self._tables[rid].extend(ids[0])
        line = {"num_scheduled": dict(output.num_scheduled_tokens),
                "total": output.total_num_scheduled_tokens,
                "tables": {rid: self._tables[rid] for rid in output.num_scheduled_tokens}}
        self._audit.write(json.dumps(line) + "\n")
        self._audit.flush()
        return output
