"""Batchscope's OpenAI-compatible HTTP API, installed beside the dashboard on one FastAPI app.

Import from the modules: ``serve.openai_api.install_api``, ``serve.limits`` (ApiLimits and
their flags), ``serve.proxies`` (which client a request is from; no torch, replay uses it).
"""
