"""The Record toggle of the dashboard: one tab's recording, ended with the tab, capped,
its files removed, and behind the presenter key like the other presenter controls."""
from __future__ import annotations

import gzip
import time
from pathlib import Path

import httpx
import pytest

from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.strings import unmarked

from support.server import BackgroundServer
from support.viewers import dashboard


def wait_until(condition, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    with dashboard(tiny_model_dir) as (server, app, _):
        yield server, app


def test_closing_the_tab_stops_its_recording_and_deletes_the_file(served):
    from gradio_client import Client

    server, app = served
    cookie = {"Cookie": f"{COOKIE}={new_visitor_id()}"}
    client = Client(server.url, headers=cookie, verbose=False)
    client.predict(True, "", api_name="/record")
    recorder = app.state.recorder
    [path] = list(recorder.directory.iterdir())
    assert recorder.recording  # subscribed to every step
    with httpx.stream("GET", f"{server.url}/gradio_api/heartbeat/{client.session_hash}",
                      headers=cookie, timeout=30) as heartbeat:
        next(heartbeat.iter_lines())  # the tab is open ... and closes
    assert wait_until(lambda: not recorder.recording)
    # discard() ends the recording, then deletes the files: the deletion may land just after
    # (the assertion right after the wait failed once in a full run).
    assert wait_until(lambda: not path.exists())
    client.close()


def capped_recording(model_dir: str, directory, limits) -> Path:
    """A tab's recording under ``limits`` of an 8-step request; returns its file once the
    recording stopped by itself (it stays downloadable)."""
    from engine import AsyncLLM, SamplingParams
    from viz.live.hub import TelemetryHub
    from viz.traces.recording import Recorder

    llm = AsyncLLM(model_dir, num_kv_blocks=64)
    try:
        llm.wait_ready(120)
        recorder = Recorder(llm, TelemetryHub(), directory, limits)
        path = recorder.start("tab-1", "alice")
        llm.add_request("a prompt", SamplingParams(max_tokens=8, ignore_eos=True)).collect()
        assert wait_until(lambda: not recorder.recording)
        assert recorder.stop("tab-1") == path
        return path
    finally:
        llm.shutdown()


def test_a_recording_stops_itself_at_its_cap_and_the_file_is_complete(tiny_model_dir, tmp_path):
    from viz.traces.trace import TraceLimits, load_trace

    trace = load_trace(capped_recording(tiny_model_dir, tmp_path, TraceLimits(max_records=3)))
    assert len(trace.records) == 3 and trace.header["text"] == "own"


def test_a_recording_stops_itself_at_its_size_cap_and_the_file_is_complete(tiny_model_dir, tmp_path):
    """The size cap (256 MiB for a tab) counts the JSON written: the recording ends at the
    first entry that reaches it, with an end line; a small cap stands in for the real one."""
    from viz.traces.recording import TAB_LIMITS
    from viz.traces.trace import TraceLimits, load_trace

    assert TAB_LIMITS.max_bytes == 256 * 2**20
    cap = 6000  # a header (~1.5 kB) and a few of the tiny model's records (~1.4 kB each)
    path = capped_recording(tiny_model_dir, tmp_path, TraceLimits(max_bytes=cap))
    trace = load_trace(path)
    assert 0 < len(trace.records) < 8 and trace.header["text"] == "own"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        sizes = [len(line) for line in lines][:-1]  # the end line comes after the cap
    assert sum(sizes[:-1]) < cap <= sum(sizes)


def visitor(server: BackgroundServer):
    from gradio_client import Client

    return Client(server.url, headers={"Cookie": f"{COOKIE}={new_visitor_id()}"}, verbose=False)


def test_stopping_the_server_deletes_the_recordings_folder(tiny_model_dir):
    with dashboard(tiny_model_dir) as (server, app, _):
        client = visitor(server)
        client.predict(True, "", api_name="/record")
        folder = app.state.recorder.directory
        assert list(folder.iterdir())
        client.close()
    assert not folder.exists()


def test_with_a_presenter_key_record_needs_the_key_and_says_which_is_wrong(tiny_model_dir):
    with dashboard(tiny_model_dir, "--presenter-key", "s3cret") as (server, app, _):
        client = visitor(server)
        missing = unmarked(client.predict(True, "", api_name="/record")[2])
        wrong = unmarked(client.predict(True, "guess", api_name="/record")[2])
        assert not app.state.recorder.recording
        assert missing.startswith("Enter the presenter key") and "wrong" in wrong
        assert client.predict(True, "s3cret", api_name="/record")[0] is True
        assert app.state.recorder.recording
        client.close()
