"""The four live views: element id, title and a one-line caption in English and Chinese."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class View:
    elem_id: str
    title: str
    title_zh: str
    caption: str
    caption_zh: str


VIEWS = (
    View("bs-token-layout", "Token layout", "token 布局",
         "This iteration's packed rows, coloured by request (hatched = prefill, solid = decode), "
         "against the token budget; below, the recent iterations side by side.",
         "本次迭代打包的行，按请求着色（斜纹 = 预填充，实心 = 解码），对照 token 预算；下方是最近的迭代。"),
    View("bs-block-tables", "Block tables and KV pool", "块表与 KV 池",
         "Left: each scheduled request's block table (logical block → physical block id). "
         "Right: every physical block of the pool: owner colour, free, cached, shared (× ref count).",
         "左：每个已调度请求的块表（逻辑块 → 物理块号）。右：池中每个物理块：所属请求颜色、空闲、已缓存、共享（× 引用计数）。"),
    View("bs-attention", "Attention segments", "注意力分段",
         "This step's ragged block diagonal: each request's query rows against its own keys only: "
         "a triangle for a prefill, a trapezoid for a chunk, one full row for a decode.",
         "本步的参差块对角：每个请求的查询行只看自己的键——预填充是三角形，分块是梯形，解码是一整行。"),
    View("bs-timing", "Timing and throughput", "耗时与吞吐",
         "Milliseconds per iteration by phase, tokens per iteration, throughput, and the rows a "
         "padded batch would have needed for the same work.",
         "每次迭代各阶段的毫秒数、每次迭代的 token 数、吞吐量，以及同样工作用填充批处理需要的行数。"),
)
