"""The plugin's entry point: a no-op without BATCHSCOPE_INGEST, a logged refusal on an untested
vLLM or a bad URL (no vLLM needed: a stand-in module names the version)."""
import logging
import sys
import types

import batchscope_vllm
import pytest


def test_without_the_ingest_url_register_does_nothing(monkeypatch):
    monkeypatch.delenv("BATCHSCOPE_INGEST", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # importing vLLM would now raise
    batchscope_vllm.register()


@pytest.mark.parametrize("version, url, expected", [
    ("0.35.0", "ws://127.0.0.1:7860/ingest",
     "reads the scheduler internals of vLLM 0.30-0.34 and this is vLLM 0.35.0"),
    ("0.29.4", "ws://127.0.0.1:7860/ingest", "this is vLLM 0.29.4"),
    ("0.34.0", "http://127.0.0.1:7860/ingest", "is not a ws:// or wss:// URL"),
])
def test_untested_vllm_or_bad_url_is_refused_with_one_clear_error(monkeypatch, caplog, version,
                                                                  url, expected):
    monkeypatch.setenv("BATCHSCOPE_INGEST", url)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__=version))
    caplog.set_level(logging.ERROR, logger="vllm.batchscope")
    batchscope_vllm.register()
    assert expected in caplog.text and "vLLM runs as usual" in caplog.text
    assert len(caplog.records) == 1


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0", "0.32.7", "0.33.0", "0.34.0",
                                     "0.34.1rc1"])
def test_every_release_from_0_30_to_0_34_and_a_ws_url_pass_the_gate(version):
    assert batchscope_vllm.why_not(version, "wss://dashboard.example/ingest") is None
