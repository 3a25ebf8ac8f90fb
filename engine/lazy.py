"""Lazy package exports (PEP 562): a package names what it exports, modules load on first use.

So ``engine.telemetry`` and ``serve.proxies`` import without torch (replay mode has no model).
"""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``exports[name]`` (relative to ``package``)."""
    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name], package), name)

    return __getattr__
