"""Presets, the requests one Fire click plans and their submission (no engine)."""
import json

import pytest

from engine import SamplingParams
from engine.prompts import Prepared
from viz.live.hub import TelemetryHub
from viz.live.privacy import Audience
from viz.live.viewer import Viewer
from viz.ui.firing import Firing, Knobs, PlannedRequest, _exact_tokens, plan_shot
from viz.ui.presets import load_presets
from viz.ui.submit import LocalSubmitter


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def library():
    return load_presets()


def test_every_preset_plans_valid_requests(library, tokenizer):
    assert {"chat", "mixed", "system", "staggered", "article"} <= set(library.presets)
    for preset in library.presets.values():
        knobs = Knobs(preset.count, preset.max_tokens, preset.temperature, preset.spacing_ms)
        planned = plan_shot(library, preset, knobs, tokenizer)
        assert planned and len({p.request_id for p in planned}) == len(planned)
        assert all(p.label for p in planned)


def test_article_scenario_is_499_then_200_then_100_tokens(library, tokenizer):
    preset = library.presets["article"]
    planned = plan_shot(library, preset, Knobs(9, 16, 0.5, 999), tokenizer)
    assert [len(p.prompt) for p in planned] == [499, 200, 100]  # count/spacing do not apply
    assert [p.after_decoding for p in planned] == [False, True, True]
    assert [p.params.max_tokens for p in planned] == [16, 16, 16]  # the slider's
    assert all(p.params.ignore_eos for p in planned)
    short = plan_shot(library, preset, Knobs(3, 1, 0.5, 0), tokenizer)
    assert [p.params.max_tokens for p in short] == [3, 3, 1]  # A and B outlive C's arrival
    assert [p.request_id[0] for p in planned] == ["A", "B", "C"]
    again = plan_shot(library, preset, Knobs(3, 16, 0.5, 0), tokenizer)
    assert again[2].prompt[:16] != planned[2].prompt[:16]  # no prefix-cache hit across shots


def rendered(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text)


def test_long_prompts_need_chunks_and_system_prompts_share_blocks(library, tokenizer):
    mixed = plan_shot(library, library.presets["mixed"], Knobs(6, 8, 0.7, 100), tokenizer)
    assert max(len(rendered(tokenizer, p.prompt)) for p in mixed) > 512  # > default budget
    system = plan_shot(library, library.presets["system"], Knobs(2, 8, 0.7, 0), tokenizer)
    first, second = (rendered(tokenizer, p.prompt) for p in system)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert shared >= 256  # many full 16-token blocks in common


def test_typed_prompt_replaces_the_presets_and_keeps_spacing(library, tokenizer):
    planned = plan_shot(library, library.presets["article"], Knobs(3, 5, 0.0, 250), tokenizer,
                        custom_prompt="<b>hi</b>")
    assert len(planned) == 3 and all(p.label == "<b>hi</b>" for p in planned)
    assert [p.delay_s for p in planned] == [0.0, 0.25, 0.5]
    assert all(p.chat and p.prompt[-1] == {"role": "user", "content": "<b>hi</b>"}
               and p.params.max_tokens == 5 for p in planned)


class BosTokenizer:
    """Encodes each character as its code point, led by BOS (1) unless told otherwise."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1] * add_special_tokens + [ord(c) for c in text]


def test_exact_token_prompts_have_one_bos():
    ids = _exact_tokens("abc", 20, BosTokenizer(), "n1")
    assert len(ids) == 20 and ids.count(1) == 1 and ids[0] == 1


def test_a_request_that_cannot_be_submitted_is_finished_with_its_error():
    class StoppedLLM:
        def add_request(self, prepared, request_id):
            raise RuntimeError("the engine is stopped")

    hub = TelemetryHub()
    params = SamplingParams(max_tokens=2)
    planned = [PlannedRequest("x1", [5, 6], "label", params, 0.0,
                              prepared=Prepared((5, 6), params, None))]
    hub.fired("x1", "token-a", "label")  # as fire() does, before its thread submits
    Firing(LocalSubmitter(StoppedLLM()), hub).submit(planned)
    [entry] = json.loads(hub.snapshot(Viewer(Audience("token-a"))).text)["requests"]
    assert entry["finished"] and entry["finish_reason"] == "error" and entry["mine"]
    assert entry["error"] == "the engine is stopped"
