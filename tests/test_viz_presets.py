"""Presets, the requests one Fire click plans and their submission (no engine)."""
import json

import pytest

from engine import SamplingParams
from viz.firing import Firing, Knobs, PlannedRequest, _exact_tokens, plan_shot
from viz.hub import TelemetryHub
from viz.presets import load_presets
from viz.privacy import Audience
from viz.viewer import Viewer


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


def test_article_scenario_is_500_200_then_100_tokens(library, tokenizer):
    preset = library.presets["article"]
    planned = plan_shot(library, preset, Knobs(9, 16, 0.5, 999), tokenizer)
    assert [len(p.prompt) for p in planned] == [500, 200, 100]  # count/spacing do not apply
    assert [p.after_decoding for p in planned] == [False, False, True]
    assert [p.request_id[0] for p in planned] == ["A", "B", "C"]
    again = plan_shot(library, preset, Knobs(3, 16, 0.5, 0), tokenizer)
    assert again[2].prompt[:16] != planned[2].prompt[:16]  # no prefix-cache hit across shots


def test_long_prompts_need_chunks_and_system_prompts_share_blocks(library, tokenizer):
    mixed = plan_shot(library, library.presets["mixed"], Knobs(6, 8, 0.7, 100), tokenizer)
    assert max(len(tokenizer.encode(p.prompt)) for p in mixed) > 512  # > default budget
    system = plan_shot(library, library.presets["system"], Knobs(2, 8, 0.7, 0), tokenizer)
    first, second = (tokenizer.encode(p.prompt) for p in system)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert shared >= 256  # many full 16-token blocks in common


def test_typed_prompt_replaces_the_presets_and_keeps_spacing(library, tokenizer):
    planned = plan_shot(library, library.presets["article"], Knobs(3, 5, 0.0, 250), tokenizer,
                        custom_prompt="<b>hi</b>")
    assert len(planned) == 3 and all(p.label == "<b>hi</b>" for p in planned)
    assert [p.delay_s for p in planned] == [0.0, 0.25, 0.5]
    assert all("<b>hi</b>" in p.prompt and p.params.max_tokens == 5 for p in planned)


class BosTokenizer:
    """Encodes each character as its code point, led by BOS (1) unless told otherwise."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1] * add_special_tokens + [ord(c) for c in text]


def test_exact_token_prompts_have_one_bos():
    ids = _exact_tokens("abc", 20, BosTokenizer(), "n1")
    assert len(ids) == 20 and ids.count(1) == 1 and ids[0] == 1


def test_a_request_that_cannot_be_submitted_is_finished_with_its_error():
    class StoppedLLM:
        def add_request(self, prompt, params, request_id):
            raise RuntimeError("the engine is stopped")

    hub = TelemetryHub()
    planned = [PlannedRequest("x1", [5, 6], "label", SamplingParams(max_tokens=2), 0.0)]
    Firing(StoppedLLM(), hub).submit(planned, "token-a")
    [entry] = json.loads(hub.snapshot(Viewer(Audience("token-a"))))["requests"]
    assert entry["finished"] and entry["finish_reason"] == "error" and entry["mine"]
    assert entry["error"] == "the engine is stopped"
