"""Batchscope's engine: continuous batching of prefill and decode in one forward pass.

Names are imported lazily (PEP 562) so that ``engine.telemetry`` can be used without torch,
e.g. by replay mode, which shows a recorded run with no model loaded.
"""
from .lazy import lazy_exports

_EXPORTS = {
    "LLM": ".llm",
    "AsyncLLM": ".async_llm",
    "RequestStream": ".request_stream",
    "EngineDeadError": ".engine_loop",
    "ModelInfo": ".info",
    "Prepared": ".prompts",
    "PromptTooLongError": ".prompts",
    "RecordSource": ".record_source",
    "SourceInfo": ".record_source",
    "LLMEngine": ".llm_engine",
    "EngineConfig": ".config",
    "SamplingParams": ".sampling_params",
    "RequestOutput": ".outputs",
    "RequestDelta": ".outputs",
    "IterationRecord": ".telemetry",
    "RequestEvent": ".telemetry",
    "SCHEMA_VERSION": ".telemetry",
}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
