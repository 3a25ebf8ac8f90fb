"""Presenter controls: who may use them, and the token budget they report."""
from types import SimpleNamespace

from engine.config import EngineConfig
from viz.ui.handlers import effective_budget
from viz.ui.presenter import PresenterAccess


def test_presenter_controls_are_open_locally_keyed_or_hidden_on_a_space():
    local = PresenterAccess.for_server(None, on_space=False)
    assert local.allows("") and not local.hidden
    keyed = PresenterAccess.for_server("s3cret", on_space=True)
    assert keyed.allows("s3cret") and not keyed.allows("") and not keyed.allows("s3cre")
    assert not keyed.hidden
    space = PresenterAccess.for_server(None, on_space=True)
    assert space.hidden and not space.allows("")


def test_turning_chunking_off_reports_the_budget_the_engine_will_use():
    config = EngineConfig(max_num_batched_tokens=512, max_model_len=1024)  # (the loaded engine's: resolved)
    llm = SimpleNamespace(config=config)
    assert effective_budget(llm, 256, chunked=True) == 256
    assert effective_budget(llm, 256, chunked=False) == 1024
    assert effective_budget(llm, 2048, chunked=False) == 2048
    assert config.max_num_batched_tokens == 512  # the engine's config is left alone


def test_a_fractional_max_tokens_or_count_becomes_the_integer_the_slider_shows():
    """3.7 typed into Max tokens: the slider shows 4, so 4 it is (it generated 3)."""
    import gradio as gr

    from viz.ui.page import _firing_controls
    from viz.ui.presets import load_presets

    with gr.Blocks():
        controls = _firing_controls(load_presets())
    assert controls.max_tokens.preprocess(3.7) == 4 and controls.count.preprocess(2.5) in (2, 3)
    assert isinstance(controls.max_tokens.preprocess(3.7), int)
