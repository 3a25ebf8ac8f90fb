"""Smoke run of the benchmark tool on a tiny model: every peer and workload, no timing asserts."""
import json

from benchmarks.__main__ import main
from benchmarks.peers import GPU_ONLY_PEERS, PEERS
from benchmarks.report import COLUMNS
from benchmarks.workloads import WORKLOADS


def test_tiny_setting_writes_expected_json(tiny_model_dir, tmp_path):
    out = tmp_path / "bench.json"
    main(["--setting", "tiny", "--model", tiny_model_dir, "--out", str(out), "--in-process",
          "--kv-cache-gb", "0.01"])
    results = json.loads(out.read_text())
    for key in ("command", "machine", "setting", "roofline", "workloads", "telemetry", "targets"):
        assert key in results
    assert results["roofline"]["gemm"]["peak_flops_per_s"] > 0
    assert set(results["workloads"]) == set(WORKLOADS)
    seen = set()
    for workload in results["workloads"].values():
        for name, peer in workload["peers"].items():
            seen.add(name)
            assert set(peer["figures"]) >= {key for key, _ in COLUMNS}
            assert peer["figures"]["output_tok_s"] > 0
        # greedy decoding of the same prompts: every peer generates the same tokens
        assert all(v == 1.0 for v in workload["agreement"].values()), workload["agreement"]
    assert seen == set(PEERS) - set(GPU_ONLY_PEERS)
    assert results["workloads"]["W1"]["peers"]["bs_mixed"]["prefill"]["num_steps"] >= 1
    assert {"throughput_cost", "direct_cost", "subscriber_ms_per_step", "engine_unphased"} <= set(results["telemetry"])
    assert [t["name"] for t in results["targets"]] and all("met" in t for t in results["targets"])
