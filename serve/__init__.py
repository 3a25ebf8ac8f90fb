"""Batchscope's OpenAI-compatible HTTP API, installed beside the dashboard on one FastAPI app."""
from .limits import ApiLimits, add_limit_arguments, limits_from_arguments
from .openai_api import install_api

__all__ = ["install_api", "ApiLimits", "add_limit_arguments", "limits_from_arguments"]
