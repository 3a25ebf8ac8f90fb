"""Batchscope's engine: continuous batching of prefill and decode in one forward pass."""
from .async_llm import AsyncLLM, RequestStream
from .config import EngineConfig
from .llm import LLM
from .llm_engine import LLMEngine
from .outputs import RequestDelta, RequestOutput
from .sampling_params import SamplingParams
from .telemetry import SCHEMA_VERSION, IterationRecord

__all__ = [
    "LLM", "AsyncLLM", "LLMEngine", "EngineConfig", "SamplingParams", "RequestOutput",
    "RequestDelta", "RequestStream", "IterationRecord", "SCHEMA_VERSION",
]
