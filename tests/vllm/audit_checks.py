"""The plugin's records held against the audit files a real vLLM wrote as it ran
(audit_scheduler.py: what its scheduler told the workers; audit_worker.py: the rows each model
runner packed). Shared by the offline run (test_vllm_engine.py) and the served one
(test_vllm_served.py)."""
from __future__ import annotations

import json
from pathlib import Path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_scheduled(records: list[dict], audit: list[dict]) -> None:
    """One record per step, with the rows and the block tables the scheduler sent."""
    assert [r["step"] for r in records] == list(range(len(audit)))
    for record, step in zip(records, audit, strict=True):
        assert record["num_rows"] == step["total"], record["step"]
        assert {s["request_id"]: s["num_rows"] for s in record["segments"]} == step["num_scheduled"]
        assert record["block_tables"] == step["tables"], f"step {record['step']}"
        assert record["source"]["row_order"] == "packed"


def check_packed(records: list[dict], packed: list[dict]) -> None:
    """Segments and cu_seqlens_q in the order the model runner packed its rows (a step
    without rows runs no model)."""
    stepped = [r for r in records if r["num_rows"]]
    assert len(packed) == len(stepped)
    for record, rows in zip(stepped, packed, strict=True):
        assert [s["request_id"] for s in record["segments"]] == rows["req_ids"], f"step {record['step']}"
        assert record["cu_seqlens_q"] == rows["query_start_loc"], f"step {record['step']}"


def mixed_steps(records: list[dict]) -> list[int]:
    """Steps that pack a prefill (or a chunk of one) with decodes."""
    return [r["step"] for r in records
            if "decode" in (kinds := {s["kind"] for s in r["segments"]})
            and kinds & {"prefill", "prefill_chunk"}]
