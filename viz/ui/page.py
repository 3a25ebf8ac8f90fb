"""The Gradio page: firing controls, presenter controls, and the containers the browser
client fills (assets/): the plots and text panels are drawn in the browser from the
telemetry stream, Gradio only carries the clicks (handlers.py). A replayed trace gets the
same page with the replay bar as its controls. Every label comes from the strings table.
This module imports the engine only inside ``build_ui``: a replay runs without torch.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr

from ..sources.replay_channels import ReplayChannels
from ..traces.player import SPEEDS
from .captions import VIEWS
from .strings import PAGE, Phrase

if TYPE_CHECKING:  # the handlers import the engine; a replay's page runs without it
    from .handlers import DashboardHandlers

FIRE_CONCURRENCY = 16  # several visitors may fire at once
CACHE_CLEANUP = (3600, 3600)  # Gradio deletes its copies of downloads older than an hour
# Icons: plain glyphs the fonts of `make browser` (fonts-wqy-microhei) have.
PAUSE, STEP, PLAY, RECORD = "‖", "⇥", "▶", "●"
STAGE_OFF = ["bs-stage-off"]  # controls the stage layout (?layout=stage, assets/stage.css) leaves out
# Gradio's queue looks for work every 1 ms and for progress every 10 ms while idle: 7% of a core
# here for a page nobody clicks, taken from the engine beside it (BENCHMARKS.md, "An idle
# server"). A click waits at most this long for the queue to notice it instead.
IDLE_POLL_S = 0.02


@dataclass
class FiringControls:
    preset: gr.Dropdown
    about: gr.Markdown
    prompt: gr.Textbox
    count: gr.Slider
    max_tokens: gr.Slider
    temperature: gr.Slider
    spacing: gr.Slider
    fire: gr.Button
    status: gr.Markdown

    def knobs(self) -> list:
        return [self.count, self.max_tokens, self.temperature, self.spacing]


@dataclass
class SteeringControls:
    """What steers Batchscope's own engine (absent when attached to another engine)."""

    pause: gr.Button
    step: gr.Button
    resume: gr.Button
    slow: gr.Slider
    policy: gr.Radio
    budget: gr.Number
    chunked: gr.Checkbox
    invariant: gr.Checkbox
    apply: gr.Button
    fresh: gr.Button  # forgets the prefix cache, so a demo fired again runs as the first time


@dataclass
class PresenterControls:
    key: gr.Textbox
    steering: SteeringControls | None
    record: gr.Checkbox
    download: gr.DownloadButton
    status: gr.Markdown


def build_ui(handlers: DashboardHandlers) -> gr.Blocks:
    with gr.Blocks(title=PAGE.en("title"), delete_cache=CACHE_CLEANUP) as demo:
        gr.HTML(_header_html(), elem_id="bs-header-wrap")
        with gr.Row(equal_height=False, elem_id="bs-main"):
            with gr.Column(scale=1, min_width=290, elem_id="bs-controls"):
                firing = _firing_controls(handlers.library)
                presenter = _presenter_controls(handlers)
                if handlers.compare is not None:
                    from ..compare.controls import compare_controls  # imports the engine
                    compare_controls(handlers.compare, presenter.key)
            _view_columns()
        _wire(demo, handlers, firing, presenter)
    return quiet_when_idle(demo)


def _wire(demo: gr.Blocks, handlers: DashboardHandlers, firing: FiringControls,
          presenter: PresenterControls) -> None:
    """Every listener of the page, in one place."""
    key, status = presenter.key, presenter.status
    firing.preset.change(handlers.preset, firing.preset, [firing.about, *firing.knobs()])
    firing.fire.click(handlers.fire, [firing.preset, firing.prompt, *firing.knobs(), key],
                      firing.status, concurrency_limit=FIRE_CONCURRENCY, api_name="fire")
    if (steer := presenter.steering) is not None:
        steer.pause.click(handlers.pause, key, status, api_name="pause")
        steer.step.click(handlers.step, key, status, api_name="step")
        steer.resume.click(handlers.resume, key, status, api_name="resume")
        steer.slow.release(handlers.slow, [steer.slow, key], status, api_name="slow")
        steer.apply.click(handlers.apply, [steer.policy, steer.budget, steer.chunked, steer.invariant, key],
                          status, api_name="apply")
        steer.fresh.click(handlers.fresh_run, key, status, api_name="fresh_run")
        demo.load(handlers.budget_range, None, steer.budget, show_progress="hidden", api_visibility="private")
    presenter.record.input(handlers.record, [presenter.record, key],
                           [presenter.record, presenter.download, status], api_name="record")
    demo.unload(handlers.tab_closed)


def _firing_controls(library) -> FiringControls:
    preset = library.default
    return FiringControls(
        preset=gr.Dropdown(library.choices(), value=preset.id, label=PAGE.both("workload")),
        about=gr.Markdown(preset.description, elem_id="bs-about", elem_classes=STAGE_OFF),
        prompt=gr.Textbox(label=PAGE.both("own_prompt"), lines=2, max_lines=6,
                          placeholder=PAGE.both("own_prompt_placeholder"), elem_id="bs-prompt",
                          elem_classes=STAGE_OFF),
        # precision 0: a typed 3.7 is the 4 the slider shows, and reaches the handler as an int
        count=gr.Slider(1, 16, value=preset.count, step=1, precision=0, label=PAGE.both("requests"),
                        elem_classes=STAGE_OFF),
        max_tokens=gr.Slider(1, 256, value=preset.max_tokens, step=1, precision=0,
                             label=PAGE.both("max_tokens"), elem_classes=STAGE_OFF),
        temperature=gr.Slider(0, 1.5, value=preset.temperature, step=0.05,
                              label=PAGE.both("temperature"), elem_classes=STAGE_OFF),
        spacing=gr.Slider(0, 2000, value=preset.spacing_ms, step=50, label=PAGE.both("spacing"),
                          elem_classes=STAGE_OFF),
        fire=gr.Button(PAGE.both("fire"), variant="primary", elem_id="bs-fire"),
        status=gr.Markdown(elem_id="bs-fire-status"),
    )


def _presenter_controls(handlers: DashboardHandlers) -> PresenterControls:
    access = handlers.access
    with gr.Accordion(PAGE.both("presenter"), open=True, visible=not access.hidden):
        key = gr.Textbox(type="password", visible=access.key is not None,
                         label=PAGE.both("presenter_key"), elem_id="bs-key")
        steering = _steering_controls(handlers.llm.config) if handlers.llm is not None else None
        with gr.Row(elem_classes=STAGE_OFF):
            record = gr.Checkbox(False, label=f"{RECORD} {PAGE.both('record')}",
                                 elem_id="bs-record")
            download = gr.DownloadButton(PAGE.both("download_trace"), size="sm",
                                         interactive=False, elem_id="bs-download")
        status = gr.Markdown(elem_id="bs-presenter-status")
    return PresenterControls(key, steering, record, download, status)


def _steering_controls(config) -> SteeringControls:
    from engine.config import POLICIES

    with gr.Row():
        pause = gr.Button(f"{PAUSE} {PAGE.both('pause')}", size="sm", elem_id="bs-pause")
        step = gr.Button(f"{STEP} {PAGE.both('step')}", size="sm", elem_id="bs-step")
        resume = gr.Button(f"{PLAY} {PAGE.both('resume')}", size="sm", elem_id="bs-resume")
    gr.HTML('<div id="bs-stage-keys" aria-live="polite"></div>', elem_id="bs-stage-keys-wrap")  # js/stage_keys.js
    slow = gr.Slider(0, 2000, value=0, step=50, elem_id="bs-slow", label=PAGE.both("slow_motion"))
    policy = gr.Radio(list(POLICIES), value=config.policy, label=PAGE.both("policy"), elem_classes=STAGE_OFF)
    budget = gr.Number(value=config.max_num_batched_tokens, precision=0, minimum=1,
                       label=PAGE.both("token_budget"), elem_classes=STAGE_OFF)
    chunked = gr.Checkbox(value=config.enable_chunked_prefill, label=PAGE.both("chunked_prefill"),
                          elem_classes=STAGE_OFF)
    invariant = gr.Checkbox(value=config.batch_invariant, label=PAGE.both("batch_invariant"),
                            interactive=config.for_device().attention_backend == "cpu",  # (maybe not loaded yet)
                            elem_id="bs-invariant", elem_classes=STAGE_OFF)
    apply = gr.Button(PAGE.both("apply"), size="sm", elem_id="bs-apply", elem_classes=STAGE_OFF)
    fresh = gr.Button(PAGE.both("fresh_run"), size="sm", elem_id="bs-fresh-run", elem_classes=STAGE_OFF)
    return SteeringControls(pause, step, resume, slow, policy, budget, chunked, invariant, apply, fresh)


def build_replay_ui(channels: ReplayChannels) -> gr.Blocks:
    """The same page for a replayed trace: the replay bar replaces firing and presenter."""
    with gr.Blocks(title=f"{PAGE.en('title')} · {PAGE.both('replay')}: {channels.name}") as demo:
        gr.HTML(_header_html(), elem_id="bs-header-wrap")
        with gr.Row(equal_height=False, elem_id="bs-main"):
            with gr.Column(scale=1, min_width=290, elem_id="bs-controls"):
                gr.HTML(_replay_bar_html(), elem_id="bs-replay-wrap")
                gr.Markdown(_trace_about(channels), elem_id="bs-about")
            _view_columns()
    return quiet_when_idle(demo)


def quiet_when_idle(demo: gr.Blocks) -> gr.Blocks:
    """Gradio's queue polls at ``IDLE_POLL_S`` while it has nothing to do (its defaults: 1 ms
    for work, 10 ms for progress; the page has no progress bars)."""
    queue = demo._queue  # Gradio gives no public setting for these
    queue.sleep_when_free = max(queue.sleep_when_free, IDLE_POLL_S)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, IDLE_POLL_S)
    return demo


def _view_columns() -> None:
    with gr.Column(scale=4, min_width=640, elem_id="bs-views-col"):
        gr.HTML(_views_html(), elem_id="bs-views-wrap")
    with gr.Column(scale=2, min_width=300, elem_id="bs-texts-col"):
        gr.HTML(_texts_html(), elem_id="bs-texts-wrap")


def _replay_bar_html() -> str:
    speeds = "".join(f'<option value="{s:g}"{" selected" if s == 1 else ""}>{s:g}×</option>'
                     for s in SPEEDS)
    play, step, speed = (html.escape(PAGE.both(k)) for k in ("play", "step", "speed"))
    return (
        '<div id="bs-replay"><div class="bs-replay-buttons">'
        f'<button id="bs-replay-play" type="button">{PLAY} {play}</button>'
        f'<button id="bs-replay-step" type="button">{STEP} {step}</button>'
        f'<select id="bs-replay-speed" title="{speed}">{speeds}</select></div>'
        '<input id="bs-replay-scrubber" type="range" min="0" max="0" value="0" step="1">'
        '<div id="bs-replay-position" class="bs-caption">–</div></div>'
    )


def _trace_about(channels: ReplayChannels) -> str:
    """The replay's description, each line in both languages (Markdown)."""
    header = channels.trace.header
    engine, hardware = header["engine"], header["hardware"]
    on_off = {True: Phrase("on"), False: Phrase("off")}
    device = hardware.get("gpu") or Phrase("cores", device=hardware["device"], cores=hardware["cpu_count"])
    lines = [
        PAGE.both("replay_about", trace=f"`{channels.name}`", model=header["model"]["name"],
                  device=device, iterations=channels.num_iterations),
        PAGE.both("replay_config", policy=engine["policy"],
                  budget=engine["max_num_batched_tokens"],
                  chunked=on_off[engine["enable_chunked_prefill"]],
                  caching=on_off[engine["enable_prefix_caching"]],
                  blocks=engine["num_kv_blocks"], block_size=engine["block_size"]),
    ]
    if channels.trace.lost_steps:
        lines.append(PAGE.both("replay_gaps",
                               steps=", ".join(map(str, channels.trace.lost_steps))))
    return "\n\n".join([*lines, PAGE.both("replay_keys")])


def _header_html() -> str:
    return (
        f'<div id="bs-header"><span class="bs-brand">{html.escape(PAGE.en("title"))}</span>'
        f'<span class="bs-tagline">{_both_html("tagline")}</span>'
        f'<span id="bs-status" class="bs-status">{_both_html("connecting")}</span>'
        '</div><div id="bs-banner" class="bs-banner" hidden><div class="bs-banner-text"></div>'
        '<div class="bs-progress"><div class="bs-progress-bar"></div></div></div>'
    )


def _both_html(key: str) -> str:
    """A text of the table as HTML in both languages, each shown or hidden by the language
    switch (dashboard.css)."""
    en, zh = html.escape(PAGE.en(key)), html.escape(PAGE.zh(key))
    return f'<span class="bs-en">{en}</span><span class="bs-joint"> · </span><span class="bs-zh">{zh}</span>'


def _title_html(en: str, zh: str) -> str:
    return (f'<b class="bs-en">{html.escape(en)}</b><span class="bs-joint"> · </span>'
            f'<b class="bs-zh">{html.escape(zh)}</b>')


def _caption_html(en: str, zh: str) -> str:
    return (f'<span class="bs-caption bs-en">{html.escape(en)}</span>'
            f'<span class="bs-caption bs-zh">{html.escape(zh)}</span>')


def _views_html() -> str:
    cards = [
        f'<figure class="bs-card"><figcaption>{_title_html(view.title, view.title_zh)}'
        f'{_caption_html(view.caption, view.caption_zh)}'
        f'</figcaption><div id="{view.elem_id}" class="bs-plot"></div></figure>'
        for view in VIEWS]
    return f'<div id="bs-views" class="bs-grid">{"".join(cards)}</div>'


def _texts_html() -> str:
    return (
        f'<div class="bs-texts-head">{_title_html(PAGE.en("texts_title"), PAGE.zh("texts_title"))}'
        f'{_caption_html(PAGE.en("texts_caption"), PAGE.zh("texts_caption"))}'
        '</div><div id="bs-texts"></div>'
    )
