"""Smoke run of the benchmark tool on a tiny model: every peer and workload, no timing asserts."""
import json

from benchmarks.__main__ import main
from benchmarks.peers import GPU_ONLY_PEERS, OPT_IN_PEERS, PEERS
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
    assert seen == set(PEERS) - set(GPU_ONLY_PEERS) - set(OPT_IN_PEERS)
    assert results["workloads"]["W1"]["peers"]["bs_mixed"]["prefill"]["num_steps"] >= 1
    assert {"throughput_cost", "direct_cost", "subscriber_ms_per_step", "engine_unphased"} <= set(results["telemetry"])
    assert [t["name"] for t in results["targets"]] and all("met" in t for t in results["targets"])


def test_engine_peers_that_cannot_run_are_reported_missing(tiny_model_dir, tmp_path):
    """vLLM and llama.cpp run the default model in their own processes: asked for with a tiny
    model in-process, each is listed as missing with its reason, and the others still run."""
    out = tmp_path / "bench.json"
    main(["--setting", "tiny", "--model", tiny_model_dir, "--out", str(out), "--in-process", "--kv-cache-gb", "0.01",
          "--workloads", "W1", "--peers", "bs_mixed,bs_mixed_bf16,vllm_cpu,llama_cpp_f16", "--no-telemetry",
          "--repeats", "2"])
    results = json.loads(out.read_text())
    assert set(results["missing"]) == {"vllm_cpu", "llama_cpp_f16"}
    assert all("default model" in reason for reason in results["missing"].values())
    peers = results["workloads"]["W1"]["peers"]
    assert set(peers) == {"bs_mixed", "bs_mixed_bf16"}
    assert len(peers["bs_mixed"]["repeats_output_tok_s"]) == 2
    assert results["peer_info"]["bs_mixed_bf16"]["precision"] == "bfloat16"
    assert results["peer_info"]["bs_mixed"]["precision"] == "float32"
