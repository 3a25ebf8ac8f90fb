"""Batchscope's OpenAI-compatible HTTP API, installed beside the dashboard on one FastAPI app.

Names are imported lazily (PEP 562): ``serve.proxies`` is used by replay mode, without torch.
"""
from engine.lazy import lazy_exports

_EXPORTS = {
    "install_api": ".openai_api",
    "ApiLimits": ".limits",
    "add_limit_arguments": ".limits",
    "limits_from_arguments": ".limits",
}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
