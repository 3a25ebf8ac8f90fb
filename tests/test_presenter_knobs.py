"""The presenter's knobs are bounded and say why (issue 25, part 6): Apply refuses a token budget
no step can use (the engine's own bound, the API's alike) through its "Not applied" message, the
page shows the range; and firing the article's preset under a policy or budget that cannot
produce its 102-row step warns why and what to change, and still fires."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr
import pytest
from test_fair_fire import FakeHub, FakeSubmitter

from engine.config import EngineConfig
from viz.ui.firing import Firing
from viz.ui.handlers import DashboardHandlers
from viz.ui.presenter import PresenterAccess
from viz.ui.presets import load_presets
from viz.ui.strings import PAGE, unmarked


@dataclass
class FakeLLM:
    """The engine's config and its reconfiguration, without an engine."""

    config: EngineConfig

    def reconfigure(self, **changes) -> dict:
        self.config, changed = self.config.reconfigured(**changes)
        return changed


class InstantSubmitter(FakeSubmitter):
    """Every earlier request of a shot is "decoding" at once: the article's shot goes out whole."""

    tokenizer = SimpleNamespace(encode=lambda text, add_special_tokens=True: list(range(3, 3 + len(text.split()))))

    def wait_for(self, request_ids, states, timeout) -> bool:
        return True


def engine_config(**asked) -> EngineConfig:
    return EngineConfig.from_kwargs(device="cpu", **asked).for_device().for_model(2048, bytes_per_token=64)


def handlers_for(config: EngineConfig, server_key: str | None = None) -> tuple[DashboardHandlers, FakeSubmitter]:
    submitter = InstantSubmitter()
    firing = Firing(submitter, FakeHub(), max_in_flight=100)
    return DashboardHandlers(FakeLLM(config), firing, load_presets(), SimpleNamespace(owner=lambda cookies: "v"),
                             recorder=None, access=PresenterAccess(server_key)), submitter


def said(call) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught]


# ---- bounded knobs -----------------------------------------------------------------------------
@pytest.mark.parametrize("policy, budget, reason", [
    ("mixed", 99_999_999, "1 to 131072 tokens"),  # the page's own words, in both languages
    ("mixed", 0, "1 至 131072 个 token"),
    ("fifo", 512, "policy must be one of"),  # (the engine's words: no page offers this policy)
])
def test_apply_refuses_a_knob_the_engine_cannot_take_and_says_why(policy, budget, reason):
    handlers, _ = handlers_for(engine_config())
    message, warned = said(lambda: handlers.apply(policy, budget, True, False, ""))
    assert warned == [message]
    message = unmarked(message)
    assert message.startswith("Not applied: ") and reason in message and " · 未应用：" in message
    assert handlers.llm.config.max_num_batched_tokens == 512 and handlers.llm.config.policy == "mixed"


def test_apply_takes_the_largest_budget_a_step_can_hold():
    handlers, _ = handlers_for(engine_config())
    said = unmarked(handlers.apply("mixed", 131072, True, False, ""))
    assert said.startswith("From the next step: mixed, budget 131072")


def test_the_page_shows_the_budgets_range_once_the_engine_knows_it():
    """(Each page load asks: the page is built while the model may still load.)"""
    handlers, _ = handlers_for(engine_config())
    assert handlers.budget_range() == gr.update(info=PAGE.both("token_budget_range", max=131072))
    handlers.llm = FakeLLM(EngineConfig())  # still loading: max_model_len not known yet
    assert handlers.budget_range() == gr.update()


def test_the_page_bounds_slow_motion_and_the_policy_and_offers_a_fresh_run():
    from viz.ui.page import _steering_controls

    with gr.Blocks():
        steering = _steering_controls(engine_config())
    assert PAGE.both("fresh_run") in steering.fresh.value
    for refused in (-1, 2001):
        with pytest.raises(gr.Error):
            steering.slow.preprocess(refused)
    with pytest.raises(gr.Error):
        steering.policy.preprocess("fifo")


def test_slow_motion_the_engine_refuses_is_said_not_raised():
    def refuse(seconds: float) -> None:
        raise ValueError(f"min step interval must be in [0, 10] seconds, got {seconds}")

    handlers, _ = handlers_for(engine_config())
    handlers.llm = SimpleNamespace(set_min_step_interval=refuse)
    message, warned = said(lambda: handlers.slow(float("nan"), ""))
    assert message == PAGE.both("not_applied", reason="min step interval must be in [0, 10] seconds, got nan")
    assert warned == [message]


# ---- the article's step ------------------------------------------------------------------------
def fire_article(handlers: DashboardHandlers, text: str = "", key: str = "") -> tuple[str, list[str]]:
    return said(lambda: handlers.fire("article", text, 3, 32, 0.7, 0, key, SimpleNamespace(cookies={})))


@pytest.mark.parametrize("asked, key, fields", [
    ({"policy": "prefill_first"}, "packed_needs_mixed", {"policy": "prefill_first"}),
    ({"max_num_batched_tokens": 64}, "packed_needs_budget", {"budget": 64}),
    ({"max_num_batched_tokens": 101}, "packed_needs_budget", {"budget": 101}),
])
def test_the_article_preset_warns_when_the_settings_cannot_pack_its_step_and_still_fires(asked, key, fields):
    handlers, submitter = handlers_for(engine_config(**asked))
    message, warned = fire_article(handlers)
    assert warned == [PAGE.both(key, rows=102, **fields)]
    assert unmarked(message).startswith("Fired 3:") and len(submitter.wait_handed(3)) == 3


def test_the_warnings_say_why_and_what_to_change_in_both_languages():
    for language in (PAGE.en, PAGE.zh):
        mixed = language("packed_needs_mixed", rows=102, policy="prefill_first")
        budget = language("packed_needs_budget", rows=102, budget=64)
        assert "102" in mixed and "prefill_first" in mixed and "mixed" in mixed.replace("prefill_first", "")
        assert budget.count("102") == 2 and "64" in budget


@pytest.mark.parametrize("asked", [{}, {"max_num_batched_tokens": 102},
                                   {"max_num_batched_tokens": 64, "enable_chunked_prefill": False}])
def test_settings_that_pack_the_articles_step_fire_it_without_a_warning(asked):
    """(Chunking off, the engine raises the budget to a whole prompt: C's 100 tokens fit.)"""
    handlers, _ = handlers_for(engine_config(**asked))
    message, warned = fire_article(handlers)
    assert warned == [] and unmarked(message).startswith("Fired 3:")


def test_no_warning_for_a_typed_prompt_or_a_visitor_who_cannot_steer():
    handlers, _ = handlers_for(engine_config(policy="prefill_first"), server_key="s3cret")
    assert fire_article(handlers, key="s3cret")[1] != []
    assert fire_article(handlers, key="")[1] == []
    assert fire_article(handlers, text="a prompt of my own", key="s3cret")[1] == []


def test_applied_says_each_half_in_its_own_language():
    handlers, _ = handlers_for(engine_config())
    text = handlers.apply("mixed", 256, True, False, "")
    english, chinese = text.split(" · ", 1)
    assert "开" not in english and " on" in english and "on" not in chinese.replace("policy", ""), text
