"""batchscope-vllm: stream every vLLM engine step to a Batchscope dashboard.

vLLM calls ``register`` (entry point group ``vllm.general_plugins``) in each of its processes:
the API server, the engine core and every worker. It does nothing unless ``BATCHSCOPE_INGEST``
names Batchscope's ingest websocket (``ws://HOST:PORT/ingest``; the token in
``BATCHSCOPE_INGEST_TOKEN``), and it refuses, with one logged error, a vLLM outside the tested
versions. Otherwise it wraps ``Scheduler.__init__``: the process that builds a scheduler (the
engine core, one per data-parallel rank) installs the tap (tap.py) on it and starts a sender
thread (sender.py). Other processes only carry the unused wrapper. Nothing runs at import time.
"""
from __future__ import annotations

import atexit
import logging
import os

__version__ = "0.1.0"
ENV_URL = "BATCHSCOPE_INGEST"
ENV_TOKEN = "BATCHSCOPE_INGEST_TOKEN"
TESTED_VLLM = (0, 32)  # the vLLM minor release the tap reads the internals of

log = logging.getLogger("vllm.batchscope")


def register() -> None:
    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        return
    import vllm

    refusal = why_not(vllm.__version__, url)
    if refusal:
        log.error("Batchscope tap off: %s. vLLM runs as usual.", refusal)
        return
    _wrap_scheduler_init(url, os.environ.get(ENV_TOKEN) or None)


def why_not(vllm_version: str, url: str) -> str | None:
    """Why the tap must stay off, or None."""
    tested = ".".join(map(str, TESTED_VLLM))
    if _minor(vllm_version) != TESTED_VLLM:
        return (f"batchscope-vllm {__version__} reads vLLM {tested}.x scheduler internals and "
                f"this is vLLM {vllm_version}; install vllm {tested}.* or a matching plugin")
    if not url.startswith(("ws://", "wss://")):
        return f"{ENV_URL}={url!r} is not a ws:// or wss:// URL"
    return None


def _minor(version: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None


def _wrap_scheduler_init(url: str, token: str | None) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.__init__
    if getattr(original, "_batchscope", False):
        return  # register() ran twice in this process

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _attach(self, url, token)

    init._batchscope = True
    Scheduler.__init__ = init


def _attach(scheduler, url: str, token: str | None) -> None:
    try:
        import vllm

        from .sender import IngestSender
        from .tap import SchedulerTap, source_info

        rank = scheduler.vllm_config.parallel_config.data_parallel_rank
        hello = {"token": token, "info": source_info(scheduler),
                 "engine": {"name": "vllm", "version": vllm.__version__, "pid": os.getpid(),
                            "data_parallel_rank": rank}}
        sender = IngestSender(url, hello).start()
        SchedulerTap(scheduler, sender.submit).install()
        atexit.register(sender.close)
        log.info("Batchscope tap on: streaming every engine step to %s", url)
    except Exception:
        log.exception("Batchscope tap could not start; vLLM runs as usual")
