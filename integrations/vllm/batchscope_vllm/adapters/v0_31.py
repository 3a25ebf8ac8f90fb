"""vLLM 0.31: nothing the tap reads changed. (0.31 added ``NewRequestData.replay_start`` and
``Request.replay_start`` for DeepSeek-V4.1's bounded sliding-window replay, and
``Request.kv_hints``; the tap reads neither.)"""
from . import v0_30


class Adapter(v0_30.Adapter):
    RELEASE = (0, 31)
