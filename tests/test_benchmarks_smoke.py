"""Smoke run of the benchmark tool on a tiny model: every peer and workload, no timing asserts."""
import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from kernels_here import needs_kernels

from benchmarks.__main__ import main
from benchmarks.llama_cpp_peer import UNSEEN
from benchmarks.peers import GPU_ONLY_PEERS, OPT_IN_PEERS, PEERS
from benchmarks.report import COLUMNS
from benchmarks.runner import merge_repeats, rounds
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


def test_engine_peers_that_cannot_run_are_reported_missing(tiny_model_dir, tmp_path, capsys):
    """vLLM and llama.cpp run in their own processes, llama.cpp the default model only: asked for
    with a tiny model in-process, each is listed as missing with its reason, and the others
    still run."""
    out = tmp_path / "bench.json"
    main(["--setting", "tiny", "--model", tiny_model_dir, "--out", str(out), "--in-process", "--kv-cache-gb", "0.01",
          "--workloads", "W1", "--peers", "bs_mixed,bs_mixed_bf16,vllm_cpu,llama_cpp_f16", "--no-telemetry",
          "--repeats", "2"])
    results = json.loads(out.read_text())
    assert set(results["missing"]) == {"vllm_cpu", "llama_cpp_f16"}
    assert "own process" in results["missing"]["vllm_cpu"]
    assert "default model" in results["missing"]["llama_cpp_f16"]
    peers = results["workloads"]["W1"]["peers"]
    assert set(peers) == {"bs_mixed", "bs_mixed_bf16"}
    assert len(peers["bs_mixed"]["repeats_output_tok_s"]) == 2
    assert results["peer_info"]["bs_mixed_bf16"]["precision"] == "bfloat16"
    assert results["peer_info"]["bs_mixed"]["precision"] == "float32"
    # repeats in rounds over the peers, alternating order: repeat r of two peers runs minutes apart
    ran = [line.split(":")[0] for line in capsys.readouterr().err.splitlines() if "(repeat" in line]
    assert ran == ["bs_mixed (repeat 0)", "bs_mixed_bf16 (repeat 0)", "bs_mixed_bf16 (repeat 1)", "bs_mixed (repeat 1)"]


def test_merged_repeats_keep_every_rate_and_the_fastest_runs_figures():
    def entry(rate, steps):
        return {"figures": {"output_tok_s": rate}, "repeats_output_tok_s": [rate], "steps": steps,
                "peak_mem_method": "VmHWM", "token_ids": [[rate]]}
    merged = merge_repeats(merge_repeats(merge_repeats(None, entry(10, "a")), entry(30, "b")), entry(20, "c"))
    assert merged["repeats_output_tok_s"] == [10, 30, 20]
    assert merged["figures"] == {"output_tok_s": 30} and merged["steps"] == "b"
    assert merged["token_ids"] == [[10]]  # repeat 0's: the prompts every peer shares
    assert rounds(["a", "b", "c"], 3) == [(0, ["a", "b", "c"]), (1, ["c", "b", "a"]), (2, ["a", "b", "c"])]


def test_llama_cpp_peer_streams_every_token_from_its_server(tmp_path, monkeypatch):
    """The llama_cpp peer against a stand-in server (tests/support/fake_llama_server.py): the server
    is started with the agreed flags, every request is fired and streamed, tokens are collected."""
    server = tmp_path / "llama-server"
    script = Path(__file__).parent / "support" / "fake_llama_server.py"
    server.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    server.chmod(0o755)
    flags = tmp_path / "flags.json"
    monkeypatch.setenv("BATCHSCOPE_LLAMA_SERVER", str(server))
    monkeypatch.setenv("FAKE_LLAMA_FLAGS", str(flags))
    out = tmp_path / "bench.json"
    main(["--setting", "tiny", "--out", str(out), "--workloads", "W1,W2", "--peers", "llama_cpp_q4_1",
          "--no-telemetry", "--kv-cache-gb", "0.01"])
    results = json.loads(out.read_text())
    started = json.loads(flags.read_text())
    assert started[started.index("-np") + 1] == "16" and "--kv-unified" in started
    assert started[started.index("-b") + 1] == "64" and started[started.index("-ctk") + 1] == "f16"
    assert results["peer_info"]["llama_cpp_q4_1"]["precision"] == "Q4_1"
    for name in ("W1", "W2"):  # W2: the long prompt arrives once the decoders have produced tokens
        peer = results["workloads"][name]["peers"]["llama_cpp_q4_1"]
        assert peer["figures"]["output_tok_s"] > 0
        # every token counted (the run checks each request's count), held-back ones without their ids
        for ids in peer["token_ids"]:
            assert ids == [UNSEEN if i % 3 == 1 or i == len(ids) - 1 else (ids[0] + i) % 1000 for i in range(len(ids))]


@needs_kernels
def test_lockstep_steps_two_builds_in_turn_and_reports_their_ratios(tiny_model_dir, tmp_path, capsys):
    """Two builds of the same kernel sources, the tiny workload in lockstep: every kind of step
    gets a ratio per round and a summary, the decode-only steps by their band of rows too, with
    each band's share of their time; nothing about the ratios' values (no timing asserts)."""
    from benchmarks import lockstep
    from engine import cpu_kernels

    out = tmp_path / "lockstep.json"
    result = lockstep.main(["--baseline", str(cpu_kernels.SOURCES), "--model", tiny_model_dir, "--setting", "tiny",
                            "--rounds", "2", "--kv-cache-gb", "0.01", "--neighbour", "0.2,1", "--out", str(out)])
    assert result["neighbour"] == {"busy_ms": 0.2, "period_ms": 1.0}
    assert len(result["rounds"]) == 2
    bands = [lockstep.band_key(*band) for band in lockstep.DECODE_BANDS]
    assert {"prefill", "decode", "all"} <= set(result["summary"]) <= {"prefill", "decode", "all", *bands}
    assert all(r["all"] > 0 for r in result["rounds"])
    shares = result["decode_shares"]
    assert shares and list(shares) == [b for b in bands if b in shares]  # in band order
    assert sum(shares.values()) == pytest.approx(1.0)
    printed = capsys.readouterr().out
    for band, share in shares.items():
        median = result["summary"][band]["median"]
        assert f"{band.removeprefix('decode ')} {median:.3f} ({share:.0%})" in printed
    assert json.loads(out.read_text()) == result
    assert cpu_kernels.load() is cpu_kernels.built()  # the baseline was swapped out again


def test_lockstep_puts_a_decode_step_in_the_band_of_its_rows():
    from benchmarks.lockstep import decode_band

    assert [decode_band(r) for r in (1, 7, 8, 15, 16, 24, 25, 300)] == [
        "decode 1-7 rows", "decode 1-7 rows", "decode 8-15 rows", "decode 8-15 rows",
        "decode 16-24 rows", "decode 16-24 rows", "decode 25+ rows", "decode 25+ rows"]


@needs_kernels
def test_the_instruction_peak_puts_each_linear_against_the_vector_units_own_peak(tiny_model_dir, tmp_path, capsys):
    """Each linear shape of the model, on Batchscope's kernel and torch's best, as a fraction of the
    vector units' peak on registers alone: the printed table is the saved JSON, every shape in it,
    each fraction a real one (no timing asserts beyond that)."""
    from benchmarks import instruction_peak

    out = tmp_path / "peak.json"
    instruction_peak.main(["--model", tiny_model_dir, "--rows", "16", "--threads", "1", "--out", str(out)])
    printed, saved = capsys.readouterr().out, json.loads(out.read_text())
    fp32 = saved["results"][0]
    assert fp32["dtype"] == "float32" and fp32["instruction_peak_gflop_s"] > 0
    assert set(fp32["shapes"]) == {"qkv", "o", "gate_up", "down"}
    for result in saved["results"]:
        if "skipped" in result:
            assert f"{result['dtype']}: skipped" in printed
            continue
        assert f"{result['dtype']}, 16 rows: vector units' peak {result['instruction_peak_gflop_s']} GFLOP/s" in printed
        for name, s in result["shapes"].items():
            assert 0 < s["batchscope"] < 1.5 and 0 < s["torch"] < 1.5
            assert f"| {name} | {s['batchscope']:.0%} | {s['torch']:.0%} |" in printed


def test_a_neighbour_burns_beside_the_block_and_is_gone_after_it():
    from benchmarks.neighbour import Neighbour, running

    with running(Neighbour.parse("0.5,2.5")) as process:
        time.sleep(0.3)
        assert process.poll() is None  # still burning
    assert process.returncode is not None
    with running(None) as nothing:
        assert nothing is None
    for bad in ("2.5,0.5", "0,1", "1", "a,b"):
        with pytest.raises(ValueError, match="--neighbour"):
            Neighbour.parse(bad)


@needs_kernels
def test_lockstep_refuses_a_baseline_of_another_interface(tmp_path):
    """Kernels whose ABI is not this tree's would be called with arguments they do not take."""
    from benchmarks import lockstep
    from engine import cpu_kernels

    older, work = tmp_path / "older", tmp_path / "work"
    shutil.copytree(cpu_kernels.SOURCES, older), work.mkdir()
    header = older / "batchscope.h"
    version = f"#define BS_ABI_VERSION {cpu_kernels.ABI_VERSION}"
    header.write_text(header.read_text().replace(version, "#define BS_ABI_VERSION 1000"))
    with pytest.raises(SystemExit, match="cannot run under this tree's engine: .*ABI version is 1000"):
        lockstep.baseline_library(str(older), work)


@needs_kernels
def test_lockstep_refuses_a_baseline_that_lacks_a_kernel(tmp_path):
    """A build from before a kernel was added (this tree's engine would call it): refused, saying which."""
    from benchmarks import lockstep
    from engine import cpu_kernels

    older, work = tmp_path / "older", tmp_path / "work"
    shutil.copytree(cpu_kernels.SOURCES, older), work.mkdir()
    (older / "argmax.c").unlink()
    with pytest.raises(SystemExit, match="cannot run under this tree's engine: the library has no bs_argmax_rows"):
        lockstep.baseline_library(str(older), work)


def test_lockstep_refuses_a_baseline_it_cannot_read(tmp_path):
    from benchmarks import lockstep

    empty, into = tmp_path / "empty", tmp_path / "into"
    empty.mkdir(), into.mkdir()
    with pytest.raises(SystemExit, match="git ls-tree"):
        lockstep.baseline_sources("no-such-revision", into)
    with pytest.raises(SystemExit, match="no kernel sources"):
        lockstep.baseline_sources(str(empty), into)


def test_each_peer_loads_once_in_its_own_process_and_runs_every_round(tiny_model_dir, tmp_path, capsys):
    """Not in-process: each peer is a resident worker, loaded and warmed up once, then asked for
    repeat r in round r (alternating order), so that repeat r of two peers runs seconds apart."""
    out = tmp_path / "bench.json"
    main(["--setting", "tiny", "--model", tiny_model_dir, "--out", str(out), "--kv-cache-gb", "0.01",
          "--workloads", "W1", "--peers", "bs_mixed,bs_prefill_first", "--no-telemetry", "--repeats", "3"])
    results = json.loads(out.read_text())
    log = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in log if "loaded and warmed up" in line] == ["bs_mixed", "bs_prefill_first"]
    ran = [line.split(":")[0] for line in log if "(repeat" in line]
    assert ran == ["bs_mixed (repeat 0)", "bs_prefill_first (repeat 0)", "bs_prefill_first (repeat 1)",
                   "bs_mixed (repeat 1)", "bs_mixed (repeat 2)", "bs_prefill_first (repeat 2)"]
    peers = results["workloads"]["W1"]["peers"]
    assert [len(peers[p]["repeats_output_tok_s"]) for p in ("bs_mixed", "bs_prefill_first")] == [3, 3]
    assert results["failed"] == {} and results["workloads"]["W1"]["agreement"] == {"bs_prefill_first": 1.0}


def _job(model: str, peer: str) -> dict:
    from dataclasses import asdict

    from benchmarks.peers import PeerContext

    ctx = PeerContext(model=model, device="cpu", dtype="float32", token_budget=64, max_num_seqs=16,
                      hf_batch_size=4, kv_cache_memory_gb=0.01)
    return {"peer": peer, "workloads": ["W1"], "setting": "tiny", "threads": 1, "ctx": asdict(ctx)}


def test_a_worker_that_fails_or_dies_is_an_error_with_its_reason(tiny_model_dir):
    from benchmarks.sessions import RemoteSession

    with pytest.raises(RuntimeError, match="peer must be one of"):  # the worker's traceback comes back
        RemoteSession(_job(tiny_model_dir, "no_such_peer"), sys.executable, timeout_s=120)
    session = RemoteSession(_job(tiny_model_dir, "bs_mixed"), sys.executable, timeout_s=120)
    assert session.repeat(0)["W1"]["figures"]["output_tok_s"] > 0
    session.proc.kill()
    session.proc.wait()
    with pytest.raises(RuntimeError, match="ended"):
        session.repeat(1)
    with pytest.raises(RuntimeError, match="ended"):
        session.close()
    assert session.proc.poll() is not None


def test_serving_summary_finds_the_highest_rate_within_the_slo_and_the_goodput_ratios():
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(goodput, ttft99, tpot99):
        return {**dict.fromkeys(METRICS, 1.0), "request_goodput": goodput, "p99_ttft_ms": ttft99, "p99_tpot_ms": tpot99}

    results = {"batchscope": {"1.0": [run(1.0, 500, 80), run(0.9, 600, 90)], "2.0": [run(1.9, 1500, 140)] * 2,
                              "4.0": [run(2.0, 9000, 400)] * 2},
               "vllm": {"1.0": [run(1.0, 500, 80)] * 2, "2.0": [run(1.6, 2500, 160)] * 2,
                        "4.0": [run(1.8, 9000, 450)] * 2}}
    summary = summarize(results)
    assert summary["headline"]["batchscope"]["highest_rate_within_slo"] == 2.0
    assert summary["headline"]["vllm"]["highest_rate_within_slo"] == 1.0
    assert summary["goodput_ratio_per_rate"]["1.0"] == {"median": 0.95, "min": 0.9, "max": 1.0}
    assert abs(summary["headline"]["best_goodput_ratio"] - 2.0 / 1.8) < 1e-9
    assert not summary["headline"]["batchscope"]["every_rate_within_slo"]
    assert "TTFT p99 <= 2000 ms" in markdown(Setting(), summary)
    below = summarize({name: {"1.0": by_rate["1.0"]} for name, by_rate in results.items()})
    assert below["headline"]["vllm"]["every_rate_within_slo"]
    assert "vllm: highest rate within the SLO 1.0 req/s (every rate tried: its limit lies higher)" in markdown(
        Setting(), below)
    above = summarize({name: {"2.0": by_rate["2.0"]} for name, by_rate in results.items()})
    assert "vllm: highest rate within the SLO: none of the rates tried (the lowest, 2.0 req/s, missed it)" in markdown(
        Setting(), above)


def test_a_serving_sitting_takes_its_slo_as_vllms_goodput_flag_and_judges_and_says_by_it(monkeypatch, capsys):
    """At the 1.5B shape neither server keeps a 150 ms TPOT at any rate on two cores: ``--goodput``
    sets the SLO the rates are judged by, the client counts goodput by, and the report names."""
    from benchmarks import serving
    from benchmarks.serving import METRICS, Setting, Slo, client_flags, markdown, summarize

    def run(tpot99):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 3000, "p99_tpot_ms": tpot99}

    results = {"batchscope": {"0.25": [run(200)] * 2, "0.5": [run(280)] * 2},
               "vllm": {"0.25": [run(260)] * 2, "0.5": [run(400)] * 2}}
    assert summarize(results)["headline"]["batchscope"]["highest_rate_within_slo"] is None
    loose = Slo.parse(["ttft:4000", "tpot:300"])
    summary = summarize(results, loose)
    assert summary["headline"]["batchscope"]["highest_rate_within_slo"] == 0.5
    assert summary["headline"]["vllm"]["highest_rate_within_slo"] == 0.25
    setting = Setting(slo=loose)
    assert "SLO: TTFT p99 <= 4000 ms and TPOT p99 <= 300 ms;" in markdown(setting, summary)
    flags = client_flags(setting, 0.5, Path("/model"), "default", run=1)
    assert flags[flags.index("--goodput"):][:3] == ["--goodput", "ttft:4000", "tpot:300"]
    assert Slo.parse(["tpot:250"]) == Slo(ttft_ms=2000, tpot_ms=250)
    monkeypatch.setattr(serving.launch, "VLLM_PYTHON", Path(__file__))
    for bad in (["itl:100"], ["tpot:-5"], ["tpot"], ["ttft:0"]):
        monkeypatch.setattr(sys, "argv", ["serving", "--goodput", *bad])
        with pytest.raises(SystemExit):
            serving.parse_args()
        assert "expected ttft:MS or tpot:MS with MS a positive number" in capsys.readouterr().err


def test_serving_sends_only_the_sampling_a_sitting_sets_and_says_which():
    from pathlib import Path

    from benchmarks.serving import METRICS, Setting, client_flags, markdown, summarize
    plain = client_flags(Setting(), 4.0, Path("/model"), "default", run=1)
    assert "--temperature" not in plain and "--top-p" not in plain
    chat_like = Setting(temperature=0.7, top_p=0.9)
    flags = client_flags(chat_like, 4.0, Path("/model"), "default", run=1)
    assert flags[flags.index("--temperature") + 1] == "0.7" and flags[flags.index("--top-p") + 1] == "0.9"
    summary = summarize({name: {"1.0": [dict.fromkeys(METRICS, 1.0)]} for name in ("batchscope", "vllm")})
    assert "sampling: server defaults." in markdown(Setting(), summary)
    assert "sampling: --temperature 0.7 --top-p 0.9." in markdown(chat_like, summary)


def test_a_benchmark_killed_by_sigterm_runs_its_finally_and_stops_its_servers(tmp_path):
    """``timeout`` or ``kill`` ends a benchmark with SIGTERM: its ``finally`` stops the servers it
    started (benchmarks.serving left a Batchscope and a vLLM server running before)."""
    import signal
    import subprocess
    import time

    stopped = tmp_path / "stopped"
    script = ("import sys, time\nfrom benchmarks.serving import exit_on_sigterm\nexit_on_sigterm()\n"
              f"try:\n    print('started', flush=True)\n    time.sleep(60)\nfinally:\n"
              f"    open({str(stopped)!r}, 'w').write('yes')\n")
    child = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.1)
    assert stopped.read_text() == "yes"


def test_a_rate_kept_above_one_missed_is_not_the_rate_a_server_sustains():
    """The highest rate within the SLO is the top of an unbroken run from the lowest rate: a run of
    5.5 req/s that missed it and one of 6.0 that (by chance of its prompts) kept it reads 5.0."""
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(tpot99):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 800, "p99_tpot_ms": tpot99}

    tpot = {"4.0": 90, "5.0": 100, "5.5": 190, "6.0": 130}
    results = {name: {rate: [run(ms)] * 2 for rate, ms in tpot.items()} for name in ("batchscope", "vllm")}
    summary = summarize(results)
    assert summary["headline"]["batchscope"]["highest_rate_within_slo"] == 5.0
    assert summary["headline"]["batchscope"]["kept_above_a_miss"] == [6.0]
    assert ("batchscope: highest rate within the SLO 5.0 req/s (6.0 req/s kept it too, above a rate that missed it)"
            in markdown(Setting(), summary))


def test_the_highest_rates_ratio_is_given_by_the_medians_in_every_repeat_and_per_repeat():
    """The issue asks for the highest rate's ratio with its spread over repeats: the medians alone read
    Batchscope 5.5 against 4.0 req/s, while by every repeat it is 5.0 against 4.0 and each repeat reads
    its own (a repeat that kept every rate tried gives a bound, not a ratio)."""
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(tpot99):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 800, "p99_tpot_ms": tpot99}

    tpot = {"batchscope": {"4.0": (74, 53), "4.5": (66, 74), "5.0": (94, 94), "5.5": (98, 170), "6.0": (140, 232)},
            "vllm": {"4.0": (124, 117), "4.5": (167, 138), "5.0": (207, 164), "5.5": (305, 277), "6.0": (269, 243)}}
    results = {name: {rate: [run(ms) for ms in pair] for rate, pair in by_rate.items()}
               for name, by_rate in tpot.items()}
    summary = summarize(results)
    assert summary["headline"]["batchscope"]["highest_rate_each_repeat"] == [6.0, 5.0]
    assert summary["headline"]["batchscope"]["highest_rate_in_every_repeat"] == 5.0
    assert summary["headline"]["vllm"]["highest_rate_in_every_repeat"] == 4.0
    ratio = summary["highest_rate_ratio"]
    assert ratio["by_medians"] == {"ratio": 5.5 / 4.0, "bound": None}
    assert ratio["in_every_repeat"] == {"ratio": 5.0 / 4.0, "bound": None}
    assert ratio["per_repeat"] == [{"ratio": 6.0 / 4.0, "bound": "at least"}, {"ratio": 5.0 / 4.5, "bound": None}]
    assert ("highest rate within the SLO, Batchscope / vLLM: 1.38x by the medians, 1.25x in every repeat; "
            "per repeat >= 1.50x, 1.11x") in markdown(Setting(), summary)


def test_a_server_that_kept_none_of_the_rates_bounds_the_ratio_by_the_lowest_rate_tried():
    """The fp32 sitting of 2026-12-06 read "n/a" for the headline ratio: vLLM-CPU missed even the lowest
    rate tried (2.0 req/s) while Batchscope kept 3.0. vLLM's limit then lies below 2.0, so the ratio
    is more than 3.0 / 2.0; the other way round, less than the lowest rate over vLLM's limit."""
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(tpot99):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 800, "p99_tpot_ms": tpot99}

    tpot = {"batchscope": {"2.0": (96, 60), "2.5": (119, 101), "3.0": (137, 127), "3.5": (391, 231)},
            "vllm": {"2.0": (190, 117), "2.5": (204, 214), "3.0": (457, 354), "3.5": (526, 486)}}
    results = {name: {rate: [run(ms) for ms in pair] for rate, pair in by_rate.items()}
               for name, by_rate in tpot.items()}
    summary = summarize(results)
    ratio = summary["highest_rate_ratio"]
    assert ratio["by_medians"] == {"ratio": 3.0 / 2.0, "bound": "more than"}
    assert ratio["in_every_repeat"] == {"ratio": 3.0 / 2.0, "bound": "more than"}
    assert ratio["per_repeat"] == [{"ratio": 3.0 / 2.0, "bound": "more than"}, {"ratio": 3.0 / 2.0, "bound": None}]
    assert ("highest rate within the SLO, Batchscope / vLLM: > 1.50x by the medians, > 1.50x in every repeat; "
            "per repeat > 1.50x, 1.50x") in markdown(Setting(), summary)
    swapped = summarize({"batchscope": results["vllm"], "vllm": results["batchscope"]})["highest_rate_ratio"]
    assert swapped["by_medians"] == {"ratio": 2.0 / 3.0, "bound": "less than"}
    neither = summarize({name: {"3.5": by_rate["3.5"]} for name, by_rate in results.items()})
    assert neither["highest_rate_ratio"]["by_medians"] is None


def test_the_serving_table_gives_each_rates_tpot_p99_and_goodput_per_repeat():
    """A median of two runs hides which way a rate went: 98 and 170 ms is a run that kept the SLO
    and one that missed it, and the notes had to copy those values out of the JSON by hand."""
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(tpot99, goodput):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 800, "p99_tpot_ms": tpot99, "request_goodput": goodput}

    results = {"batchscope": {"5.5": [run(98, 5.06), run(170, 3.1)]}, "vllm": {"5.5": [run(305, 1.25), run(277, 0.6)]}}
    table = markdown(Setting(), summarize(results))
    assert "| TPOT p99 per repeat ms | goodput per repeat |" in table
    row = next(line for line in table.splitlines() if line.startswith("| batchscope | 5.5 |"))
    assert row.endswith("| 98, 170 | 5.06, 3.10 |")
    row = next(line for line in table.splitlines() if line.startswith("| vllm | 5.5 |"))
    assert row.endswith("| 305, 277 | 1.25, 0.60 |")
    first_runs = {name: {"5.5": by_rate["5.5"][:1]} for name, by_rate in results.items()}
    single = markdown(Setting(repeats=1), summarize(first_runs))
    assert "128 prompts per run, 1 repeat (medians)" in single


def test_the_highest_rate_tried_gives_each_servers_output_against_what_was_offered():
    """What bounds the highest rate within the SLO is each server's capacity: at a rate past both
    limits the output each delivers (and its share of the offered tokens) says it, run by run, where
    a 0.5 req/s grid of SLO verdicts reads 1.11x or 1.22x by one run's luck."""
    from benchmarks.serving import METRICS, Setting, markdown, summarize

    def run(tok_s):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 800, "p99_tpot_ms": 200, "output_throughput": tok_s}

    results = {"batchscope": {"4.0": [run(190)] * 2, "6.0": [run(262), run(250)]},
               "vllm": {"4.0": [run(182)] * 2, "6.0": [run(221), run(217)]}}
    summary = summarize(results)
    top = summary["highest_rate_output"]
    assert top["rate"] == "6.0"
    assert top["ratio"] == {"median": (262 / 221 + 250 / 217) / 2, "min": 250 / 217, "max": 262 / 221}
    assert ("- at 6.0 req/s, the highest rate tried (288 output tok/s offered on average): batchscope 256 tok/s (89%), "
            "vllm 219 tok/s (76%); Batchscope / vLLM 1.17x (repeats 1.15-1.19)") in markdown(Setting(), summary)


def test_w1_sittings_pool_their_pairs_and_refuse_what_differs(tmp_path, capsys):
    """Two W1 sittings at the 0.5B shape read 1.202x and 1.183x by their own medians; their six
    pairs pooled read 1.199x, short of the 1.2x goal, which no single sitting's line says. Their
    repeats may differ, and a field an older save lacks is not compared; a sitting of another model
    does not pool, and the error names the field; a file that is not a sitting is refused by name."""
    from benchmarks import pool

    def sitting(model, ours, theirs, extra_peer=False, **setting):
        peers = {"bs_mixed": {"repeats_output_tok_s": ours}, "vllm_cpu": {"repeats_output_tok_s": theirs}}
        if extra_peer:
            peers |= {"bs_mixed_bf16": {"repeats_output_tok_s": [90.0]},
                      "vllm_cpu_bf16": {"repeats_output_tok_s": [75.0]}}
        return {"setting": {"name": "full", "repeats": 1, "token_budget": 256, **setting},
                "context": {"model": model, "dtype": "float32", "kv_cache_memory_gb": 0.5},
                "machine": {"torch_threads": 2}, "workloads": {"W1": {"peers": peers}}}

    paths = [tmp_path / f"{name}.json" for name in ("a", "b", "other", "junk")]
    paths[0].write_text(json.dumps(sitting("qwen", [49.2, 45.43, 42.35], [41.14, 37.8, 32.29], extra_peer=True)))
    paths[1].write_text(json.dumps(sitting("qwen", [47.66, 45.04, 40.71], [37.09, 38.24, 34.41], repeats=3,
                                           telemetry_rounds=5, a_newer_field=1)))  # none of these keeps it apart
    paths[2].write_text(json.dumps(sitting("smollm2", [1.0], [1.0])))
    paths[3].write_text("[1, 2]")
    rows = pool.main([str(paths[0]), str(paths[1])])
    table = capsys.readouterr().out
    fp32 = next(row for row in rows if row["ours"] == "bs_mixed")
    assert len(fp32["pairs"]) == 6 and fp32["median"] == 1.199 and fp32["met"] is False
    assert "| W1 | bs_mixed / vllm_cpu | 1.199 [1.178-1.312] | 6 | 1.202, 1.183 | >= 1.2 | **no** |" in table
    assert "| W1 | bs_mixed_bf16 / vllm_cpu_bf16 | 1.200 [1.200-1.200] | 1 | 1.200, - | >= 1.2 | yes |" in table
    with pytest.raises(SystemExit, match=r"differ in context.model: 'qwen' .*'smollm2'.*only repeats, telemetry"):
        pool.main([str(paths[0]), str(paths[2])])
    with pytest.raises(SystemExit, match=r"junk.json: not a JSON object"):
        pool.main([str(paths[0]), str(paths[3])])
    paths[3].write_text("{}")
    with pytest.raises(SystemExit, match=r"junk.json: not the results of `python -m benchmarks`"):
        pool.main([str(paths[0]), str(paths[3])])


def test_serving_sittings_pool_rate_by_rate_and_refuse_what_differs(tmp_path, monkeypatch, capsys):
    """vLLM-CPU's limit at the 1.5B shape took two sittings: the first missed the lowest rate by
    the median of two runs (402 and 265 ms), the second tried the rates below. Pooled, each rate's
    median is over every run it had, and the report is the one a sitting gives."""
    from benchmarks import serving_pool
    from benchmarks.serving import METRICS, Setting, Slo, report

    def run(tpot99, goodput=1.0):
        return {**dict.fromkeys(METRICS, 1.0), "p99_ttft_ms": 900, "p99_tpot_ms": tpot99, "request_goodput": goodput}

    slo = Slo(ttft_ms=4000, tpot_ms=300)
    first = {"batchscope": {"0.25": [run(280), run(260)], "0.5": [run(290, 0.43), run(247, 0.43)],
                            "0.75": [run(953)] * 2},
             "vllm": {"0.25": [run(402), run(265)], "0.5": [run(462, 0.28)] * 2, "0.75": [run(1374)] * 2}}
    second = {"batchscope": {"0.125": [run(154), run(131)], "0.25": [run(200)] * 2},
              "vllm": {"0.125": [run(283), run(256)], "0.25": [run(250), run(260)]}}
    report(tmp_path / "a", Setting(rates=(0.25, 0.5, 0.75), slo=slo), first)
    report(tmp_path / "b", Setting(rates=(0.125, 0.25), seed=7, slo=slo), second)
    alone = json.loads((tmp_path / "a" / "serving.json").read_text())
    assert alone["headline"]["vllm"]["highest_rate_within_slo"] is None  # 333 ms, the median of 402 and 265
    monkeypatch.setattr(sys, "argv", ["serving_pool", str(tmp_path / "a"), str(tmp_path / "b" / "serving.json"),
                                      "--out", str(tmp_path / "pooled")])
    serving_pool.main()
    pooled = json.loads((tmp_path / "pooled" / "serving.json").read_text())
    assert list(pooled["results"]["vllm"]) == ["0.125", "0.25", "0.5", "0.75"]
    assert pooled["per_repeat"]["vllm"]["0.25"]["p99_tpot_ms"] == [402, 265, 250, 260]
    assert pooled["medians"]["vllm"]["0.25"]["p99_tpot_ms"] == 262.5
    assert pooled["headline"]["vllm"]["highest_rate_within_slo"] == 0.25
    assert pooled["headline"]["vllm"]["highest_rate_in_every_repeat"] == 0.125  # 402 ms in one run of 0.25
    assert pooled["headline"]["batchscope"]["highest_rate_within_slo"] == 0.5
    assert pooled["highest_rate_ratio"]["by_medians"] == {"ratio": 2.0, "bound": None}
    assert pooled["highest_rate_ratio"]["per_repeat"] == []  # 0.25 has four runs, the others two
    text = (tmp_path / "pooled" / "serving.md").read_text()
    assert text.startswith(f"Pooled from 2 sittings: {tmp_path / 'a'} (rates 0.25, 0.5, 0.75; 2 repeats); ")
    assert "128 prompts per run, 2-4 runs a rate (medians)" in text
    assert "2.00x by the medians, 4.00x in every repeat\n" in text
    assert next(line for line in text.splitlines() if line.startswith("| vllm | 0.25 |")).endswith(
        "| 402, 265, 250, 260 | 1.00, 1.00, 1.00, 1.00 |")
    report(tmp_path / "e", Setting(rates=(0.0625,), repeats=1, slo=slo),
           {"batchscope": {"0.0625": [run(150)]}, "vllm": {"0.0625": [run(250)]}})
    serving_pool.pool([tmp_path / "a", tmp_path / "e"], tmp_path / "pooled-e")
    assert f"; {tmp_path / 'e'} (rates 0.0625; 1 repeat).\n" in (tmp_path / "pooled-e" / "serving.md").read_text()
    report(tmp_path / "c", Setting(rates=(0.125,), dtype="bfloat16", slo=slo), second)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "serving.json").write_text("{")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "serving.json").write_text("[1, 2]")
    for paths, why in (([tmp_path / "a", tmp_path / "c"], "the sittings differ in dtype: 'float32' ("),
                       ([tmp_path / "a", tmp_path / "nowhere"], "nowhere: not found (the --out directory"),
                       ([tmp_path / "d"], "not JSON"), ([tmp_path / "f"], "serving.json: not a JSON object")):
        monkeypatch.setattr(sys, "argv", ["serving_pool", *map(str, paths)])
        with pytest.raises(SystemExit):
            serving_pool.main()
        assert why in capsys.readouterr().err


def test_each_serving_run_has_prompts_of_its_own_and_both_servers_the_same(monkeypatch, tmp_path):
    """One seed for every run let each run find the last one's prompts in vLLM's prefix cache."""
    from benchmarks import serving

    seeds: dict[str, dict[str, str]] = {}  # run (the file name less the server) -> server -> seed

    def fake_client(url, flags, out, log):
        seeds.setdefault(out.name.replace(url, "*"), {})[url] = flags[flags.index("--seed") + 1]
        return dict.fromkeys(serving.METRICS, 1.0)

    monkeypatch.setattr(serving, "run_client", fake_client)
    servers = {name: type("Server", (), {"url": name})() for name in serving.ENGINES}
    setting = serving.Setting(rates=(1.0, 2.0), repeats=2)
    serving.warm_up(servers, setting, tmp_path, tmp_path)
    serving.measure(servers, setting, tmp_path, tmp_path)
    assert all(set(by_server) == set(serving.ENGINES) and len(set(by_server.values())) == 1
               for by_server in seeds.values())  # each run: both servers, one seed
    measured = [by_server["vllm"] for run, by_server in seeds.items() if "warm-up" not in run]
    assert len(measured) == len(set(measured)) == 4
    assert seeds["serving-*-warm-up.json"]["vllm"] not in measured


def test_the_ceilings_are_the_run_with_its_steps_at_their_roofline():
    """What the targets on steps are worth: the run's time if a step took only the longer of its
    FLOPs at the GEMM peak and its bytes at the bandwidth. Two 100 ms prefill steps of 1 GFLOP
    (roofline 20 ms: their 2 GB of weights) and two 50 ms decode steps, one bound by its bytes
    (20 ms against 10 ms of FLOPs), one by its FLOPs (30 ms): with the decode steps at their
    roofline 250 of 300 ms, with every step 90 of 300."""
    from benchmarks.metrics import run_ceilings
    from benchmarks.timings import StepStat

    def step(rows, decode_rows, flops, wall):
        return StepStat(rows, decode_rows, flops, 0.0, wall, wall, wall, wall, wall)

    steps = [step(256, 8, 1e9, 100.0), step(256, 0, 1e9, 100.0), step(16, 16, 1e9, 50.0), step(16, 16, 3e9, 50.0)]
    ceilings = run_ceilings(steps, weight_bytes=2e9, bandwidth=1e11, peak_flops=1e11)
    assert ceilings["decode_share"] == pytest.approx(100 / 300, abs=1e-3)
    assert ceilings["decode_at_roofline"] == pytest.approx(250 / 300, abs=1e-3)
    assert ceilings["all_at_roofline"] == pytest.approx(90 / 300, abs=1e-3)


def test_a_run_whose_prefill_outruns_the_gemm_probe_takes_its_own_fastest_step_as_the_peak():
    """The GEMM peak is a probe of torch's matmul (best of the run's start and end); on a shared host it
    can fall in a slow minute, and the engine's own kernels may outrun torch's. A ceiling below what
    a step reached put the "at most" bounds below the measured ratio (a 0.5B sitting: 1.20x measured,
    "at most 1.16x with every step at its roofline"). Here the probe reads 100 GFLOP/s and a
    prefill-heavy step runs 2 GFLOP in 10 ms: the rooflines take 200 GFLOP/s, no step is slower
    than its roofline, and the report names the peak it took."""
    from benchmarks import report
    from benchmarks.roofline import ModelShapes
    from benchmarks.runner import _efficiency
    from benchmarks.settings import SETTINGS
    from benchmarks.timings import StepStat

    def step(rows, decode_rows, flops, ms):
        return vars(StepStat(rows, decode_rows, flops, 0.0, ms, ms, ms, ms, ms))

    shapes = ModelShapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=256)
    steps = [step(256, 0, 2e9, 10.0), step(256, 8, 1.5e9, 10.0), step(16, 16, 1e8, 5.0)]
    peer = _efficiency(steps, {"peak_flops_per_s": 1e11}, {"shapes": shapes.to_dict(), "bandwidth_bytes_per_s": 1e11},
                       SETTINGS["full"], itemsize=4, threads=2)
    assert peer["prefill"]["forward_fraction_max"] == 2.0  # against the probe: what torch's matmul reaches
    assert peer["ceilings"]["all_at_roofline"] <= 1.0
    assert peer["decode"]["roofline_ms_median"] == pytest.approx(0.5, abs=0.01)  # 0.1 GFLOP at 200 GFLOP/s
    results = {"workloads": {"W1": {"description": "W1", "peers": {"bs_mixed": {"figures": {}, **peer}}}}}
    line = next(x for x in report.markdown_tables(results).splitlines() if "at its roofline" in x)
    assert "the GEMM peak taken: the run's fastest prefill-heavy step, 200.0 GFLOP/s, above the probe's 100.0" in line


def test_the_decode_floor_says_how_much_of_it_a_step_at_its_roofline_could_reach():
    """A decode step whose arithmetic at the GEMM peak outlasts its bytes at the bandwidth cannot
    reach the floor on any kernel: 2 GB at 100 GB/s is a 20 ms floor; two 50 ms steps of 3 GFLOP
    (30 ms at 100 GFLOP/s) reach 40% of it and could reach 67%, one of 1 GFLOP could reach all of
    it. The report's line and the target's detail say so beside the measured fraction."""
    from benchmarks import report
    from benchmarks.metrics import decode_efficiency
    from benchmarks.timings import StepStat

    def step(flops):
        return StepStat(16, 16, flops, 0.0, 50.0, 50.0, 50.0, 50.0, 50.0)

    decode = decode_efficiency([step(3e9), step(3e9), step(1e9)], weight_bytes=2e9, bandwidth=1e11,
                               peak_flops=1e11)
    assert (decode["floor_ms_median"], decode["roofline_ms_median"]) == (20.0, 30.0)
    assert (decode["forward_fraction_median"], decode["attainable_fraction_median"]) == (0.4, 0.667)
    peer = {"figures": {}, "decode": decode}
    results = {"workloads": {"W1": {"description": "W1", "peers": {"bs_mixed": peer}}}}
    line = next(x for x in report.markdown_tables(results).splitlines() if "decode-only" in x)
    assert "= 40% (whole step 40%); at most 67% on this host (at their roofline, 30.0 ms" in line
    target = next(t for t in report.engine_targets(results) if "decode-only" in t.name)
    assert (target.value, target.threshold, target.met) == (0.4, 0.75, False)
    assert "at most 67% on this host" in target.detail


def test_a_peer_that_fails_while_the_oom_killer_ends_a_process_is_said_to_have_run_out_of_memory(monkeypatch):
    """vLLM's worker, killed by the kernel for memory, says only "Executor failed"; the log line and
    the report's last word on the peer say that memory ran out, and what to run instead. A failure
    without a kill is reported as it was."""
    from benchmarks import report, runner

    class DiesInRepeat:
        def repeat(self, r):
            raise RuntimeError("Traceback ...\nRuntimeError: Executor failed.")

    kills = iter([3, 4, 4, 4])
    monkeypatch.setattr(runner, "oom_kills", lambda: next(kills))
    results, log = {"failed": {}}, []
    runner._run_repeat(results, "vllm_cpu", DiesInRepeat(), 0, log.append)
    runner._run_repeat(results, "vllm_cpu_bf16", DiesInRepeat(), 1, log.append)
    assert "Executor failed." in log[0] and "OOM killer ended 1 process(es)" in log[0]
    assert "OOM" not in log[1] and results["failed"]["vllm_cpu_bf16"].endswith("Executor failed.")
    said = report.markdown_tables({"workloads": {}, "failed": results["failed"]})
    assert "- **vllm_cpu failed**: the Linux OOM killer ended 1 process(es) meanwhile" in said
    assert "run fewer peers at once (--peers A,B, then --peers C,D)" in said
