"""One adapter per vLLM minor release: what the tap reads from that release's scheduler.

The tap (tap.py) never touches a vLLM object itself; it asks the adapter chosen here for the
installed vLLM. ``base.SchedulerAdapter`` holds the reads as of the oldest supported release
(0.30); each ``vX_Y.py`` is that release's ``Adapter`` and overrides only what changed, with the
change in its docstring. A new vLLM release is one new file and one entry in ``RELEASES``.

Nothing here imports vLLM: the version gate (``__init__.why_not``) runs before vLLM is
imported, and the adapter modules import vLLM only when the tap is installed.
"""
from __future__ import annotations

from importlib import import_module

RELEASES: tuple[tuple[int, int], ...] = ((0, 30), (0, 31), (0, 32), (0, 33), (0, 34))


def release_of(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a vLLM version string ("0.34.0", "0.33.1rc1"), or None."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def supported_range() -> str:
    """The releases the adapters cover, as people write them: "0.30-0.34"."""
    return f"{_text(RELEASES[0])}-{_text(RELEASES[-1])}"


def adapter_class(version: str):
    """The ``Adapter`` class for an installed vLLM ``version``; KeyError outside RELEASES."""
    release = release_of(version)
    if release not in RELEASES:
        raise KeyError(f"no adapter for vLLM {version} (supported: {supported_range()})")
    return import_module(f".v{release[0]}_{release[1]}", __name__).Adapter


def _text(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))
