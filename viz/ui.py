"""The Gradio page: firing controls, presenter controls, and the containers dashboard.js fills.

The plots and text panels are drawn in the browser from the telemetry stream (assets/
dashboard.js); Gradio only carries the clicks. Handlers know the visitor by the same
``bs_visitor`` cookie as the stream (identity.py), so a visitor reads the text of their own
requests only, across reloads.
A replayed trace gets the same page with the replay bar (assets/replay.js) as its controls.
This module imports the engine only inside ``build_ui``: a replay runs without torch.
"""
from __future__ import annotations

import html
from dataclasses import replace
from typing import TYPE_CHECKING

import gradio as gr

from .captions import VIEWS
from .firing import Firing
from .identity import VisitorIdentity
from .presenter import PresenterAccess
from .presets import PresetLibrary
from .recording import Recorder
from .replay import SPEEDS
from .replay_channels import ReplayChannels

if TYPE_CHECKING:
    from engine import AsyncLLM

FIRE_CONCURRENCY = 16  # several visitors may fire at once
KEY_NEEDED = "Enter the presenter key first · 请先输入演示密钥"


def build_ui(llm: AsyncLLM, firing: Firing, library: PresetLibrary, identity: VisitorIdentity,
             recorder: Recorder, access: PresenterAccess) -> gr.Blocks:
    from engine.config import POLICIES

    from .firing import Knobs, plan_shot

    preset = library.default
    config = llm.config
    with gr.Blocks(title="Batchscope") as demo:
        gr.HTML(_header_html(), elem_id="bs-header-wrap")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=290, elem_id="bs-controls"):
                preset_box = gr.Dropdown(library.choices(), value=preset.id,
                                         label="Workload · 工作负载")
                about = gr.Markdown(_about(preset), elem_id="bs-about")
                prompt = gr.Textbox(label="Your own prompt (optional) · 自己的提示（可选）",
                                    placeholder="Replaces the preset's prompts · 替代预设提示",
                                    lines=2, max_lines=6, elem_id="bs-prompt")
                count = gr.Slider(1, 16, value=preset.count, step=1, label="Requests · 请求数")
                max_tokens = gr.Slider(1, 256, value=preset.max_tokens, step=1,
                                       label="Max tokens · 最大生成数")
                temperature = gr.Slider(0, 1.5, value=preset.temperature, step=0.05,
                                        label="Temperature · 温度")
                spacing = gr.Slider(0, 2000, value=preset.spacing_ms, step=50,
                                    label="Arrival spacing (ms) · 到达间隔（毫秒）")
                fire_button = gr.Button("Fire · 发射", variant="primary", elem_id="bs-fire")
                fire_status = gr.Markdown(elem_id="bs-fire-status")
                with gr.Accordion("Presenter · 演示控制", open=True):
                    with gr.Column(visible=not access.hidden):
                        key = gr.Textbox(type="password", visible=access.key is not None,
                                         label="Presenter key · 演示密钥", elem_id="bs-key")
                        with gr.Row():
                            pause = gr.Button("⏸ Pause", size="sm", elem_id="bs-pause")
                            step = gr.Button("⏭ Step", size="sm", elem_id="bs-step")
                            resume = gr.Button("▶ Resume", size="sm", elem_id="bs-resume")
                        slow = gr.Slider(0, 2000, value=0, step=50, elem_id="bs-slow",
                                         label="Slow motion: min ms per step · 慢动作")
                        policy = gr.Radio(list(POLICIES), value=config.policy,
                                          label="Policy · 调度策略")
                        budget = gr.Number(value=config.max_num_batched_tokens, precision=0,
                                           minimum=1, label="Token budget · token 预算")
                        chunked = gr.Checkbox(value=config.enable_chunked_prefill,
                                              label="Chunked prefill · 分块预填充")
                        apply = gr.Button("Apply · 应用", size="sm", elem_id="bs-apply")
                    with gr.Row():
                        record = gr.Checkbox(False, label="⏺ Record · 录制", elem_id="bs-record")
                        download = gr.DownloadButton("Download trace · 下载", size="sm",
                                                     interactive=False, elem_id="bs-download")
                    presenter_status = gr.Markdown(elem_id="bs-presenter-status")
            _view_columns()

        def on_preset(preset_id: str):
            chosen = library.presets[preset_id]
            return (_about(chosen), chosen.count, chosen.max_tokens, chosen.temperature,
                    chosen.spacing_ms)

        def on_fire(preset_id, text, n, max_new, temp, spacing_ms, request: gr.Request):
            knobs = Knobs(int(n), int(max_new), float(temp), float(spacing_ms))
            try:
                planned = plan_shot(library, library.presets[preset_id], knobs,
                                    llm.engine.tokenizer if llm.engine else None, text or "")
                ids = firing.fire(planned, _owner(identity, request))
            except (ValueError, RuntimeError) as exc:
                gr.Warning(str(exc))
                return f"Not fired: {exc}"
            return f"Fired {len(ids)}: {', '.join(ids)}"

        def step_one() -> None:
            if not llm.paused:
                llm.pause()
            llm.step_once()

        def keyed(handler):
            """``handler`` run only for a visitor who entered the presenter key (the last input)."""
            def run(*values):
                *args, entered = values
                if not access.allows(entered):
                    gr.Warning(KEY_NEEDED)
                    return KEY_NEEDED
                return handler(*args)
            return run

        def presenter(control):
            def run() -> str:
                control()
                return "Paused · 已暂停" if llm.paused else "Running · 运行中"
            return run

        def on_slow(ms: float) -> str:
            llm.set_min_step_interval(float(ms) / 1000)
            return f"Slow motion · 慢动作: {int(ms)} ms/step" if ms else "Full speed · 全速"

        def on_apply(new_policy: str, new_budget: float, new_chunked: bool) -> str:
            try:
                llm.reconfigure(policy=new_policy, max_num_batched_tokens=int(new_budget or 0),
                                enable_chunked_prefill=bool(new_chunked))
            except ValueError as exc:
                gr.Warning(str(exc))
                return f"Not applied: {exc}"
            return (f"Next step · 下一步起: {new_policy}, "
                    f"budget {_effective_budget(llm, int(new_budget), bool(new_chunked))}, "
                    f"chunked {'on' if new_chunked else 'off'}")

        def on_record(on: bool, request: gr.Request):
            owner = _owner(identity, request)
            if on:
                try:
                    recorder.start(owner)
                except RuntimeError as exc:
                    gr.Warning(str(exc))
                    return False, gr.DownloadButton(interactive=False), f"Not recording: {exc}"
                return True, gr.DownloadButton(value=None, interactive=False), "⏺ Recording · 录制中"
            path = recorder.stop(owner)
            if path is None:
                return False, gr.DownloadButton(interactive=False), ""
            return False, gr.DownloadButton(value=str(path), interactive=True), (
                f"Recorded · 已录制 {path.name}: replay with `python app.py --replay FILE`")

        preset_box.change(on_preset, preset_box, [about, count, max_tokens, temperature, spacing])
        fire_button.click(on_fire, [preset_box, prompt, count, max_tokens, temperature, spacing],
                          fire_status, concurrency_limit=FIRE_CONCURRENCY)
        for button, control in ((pause, llm.pause), (step, step_one), (resume, llm.resume)):
            button.click(keyed(presenter(control)), key, presenter_status)
        slow.release(keyed(on_slow), [slow, key], presenter_status)
        apply.click(keyed(on_apply), [policy, budget, chunked, key], presenter_status)
        record.input(on_record, record, [record, download, presenter_status])
    return demo


def build_replay_ui(channels: ReplayChannels) -> gr.Blocks:
    """The same page for a replayed trace: the replay bar replaces firing and presenter."""
    with gr.Blocks(title=f"Batchscope replay: {channels.name}") as demo:
        gr.HTML(_header_html(), elem_id="bs-header-wrap")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=290, elem_id="bs-controls"):
                gr.HTML(_replay_bar_html(), elem_id="bs-replay-wrap")
                gr.Markdown(_trace_about(channels), elem_id="bs-about")
            _view_columns()
    return demo


def _view_columns() -> None:
    with gr.Column(scale=4, min_width=640):
        gr.HTML(_views_html(), elem_id="bs-views-wrap")
    with gr.Column(scale=2, min_width=300):
        gr.HTML(_texts_html(), elem_id="bs-texts-wrap")


def _replay_bar_html() -> str:
    speeds = "".join(f'<option value="{s:g}"{" selected" if s == 1 else ""}>{s:g}×</option>'
                     for s in SPEEDS)
    return (
        '<div id="bs-replay"><div class="bs-replay-buttons">'
        '<button id="bs-replay-play" type="button">▶ Play</button>'
        '<button id="bs-replay-step" type="button">⏭ Step</button>'
        f'<select id="bs-replay-speed" title="speed · 速度">{speeds}</select></div>'
        '<input id="bs-replay-scrubber" type="range" min="0" max="0" value="0" step="1">'
        '<div id="bs-replay-position" class="bs-caption">–</div></div>'
    )


def _trace_about(channels: ReplayChannels) -> str:
    header = channels.trace.header
    engine, hardware = header["engine"], header["hardware"]
    device = hardware.get("gpu") or f"{hardware['device']} ({hardware['cpu_count']} cores)"
    return (
        f"**Replay · 回放** `{channels.name}`: {header['model']['name']} on {device}, "
        f"{channels.num_iterations} iterations.\n\n"
        f"Policy {engine['policy']}, token budget {engine['max_num_batched_tokens']}, "
        f"chunked prefill {'on' if engine['enable_chunked_prefill'] else 'off'}, "
        f"prefix caching {'on' if engine['enable_prefix_caching'] else 'off'}, "
        f"{engine['num_kv_blocks']} KV blocks of {engine['block_size']} tokens.\n\n"
        "Space: play/pause · →: step · drag the scrubber to any iteration."
    )


def _effective_budget(llm: AsyncLLM, budget: int, chunked: bool) -> int:
    """The budget the engine will run with: without chunked prefill it raises it so a whole
    prompt fits one step (the engine's own rule, applied to a copy of its config)."""
    if llm.engine is None:  # max_model_len is known once the model is loaded
        return budget
    config = replace(llm.engine.config, max_num_batched_tokens=budget,
                     enable_chunked_prefill=chunked)
    config.ensure_whole_prompts_fit()
    return config.max_num_batched_tokens


def _owner(identity: VisitorIdentity, request: gr.Request | None) -> str | None:
    return identity.owner(request.cookies) if request is not None else None


def _about(preset) -> str:
    return f"{preset.about}\n\n{preset.about_zh}"


def _header_html() -> str:
    return (
        '<div id="bs-header"><span class="bs-brand">Batchscope</span>'
        '<span class="bs-tagline">continuous batching, live · 连续批处理实况</span>'
        '<span id="bs-status" class="bs-status">connecting…</span></div>'
        '<div id="bs-banner" class="bs-banner" hidden><div class="bs-banner-text"></div>'
        '<div class="bs-progress"><div class="bs-progress-bar"></div></div></div>'
    )


def _views_html() -> str:
    cards = []
    for view in VIEWS:
        cards.append(
            f'<figure class="bs-card"><figcaption><b>{html.escape(view.title)}</b> · '
            f'{html.escape(view.title_zh)}<span class="bs-caption">{html.escape(view.caption)}'
            f'</span><span class="bs-caption bs-zh">{html.escape(view.caption_zh)}</span>'
            f'</figcaption><div id="{view.elem_id}" class="bs-plot"></div></figure>'
        )
    return f'<div id="bs-views" class="bs-grid">{"".join(cards)}</div>'


def _texts_html() -> str:
    return (
        '<div class="bs-texts-head"><b>Requests</b> · 请求'
        '<span class="bs-caption">Each request\'s text, state, TTFT and inter-token latency, in '
        'its colour. Other visitors\' requests show without text.</span>'
        '<span class="bs-caption bs-zh">每个请求的文本、状态、首 token 延迟和 token 间延迟，颜色与各图一致。'
        '其他访客的请求不显示文本。</span></div><div id="bs-texts"></div>'
    )
