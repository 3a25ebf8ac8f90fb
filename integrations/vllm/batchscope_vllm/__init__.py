"""batchscope-vllm: stream every vLLM engine step to a Batchscope dashboard.

vLLM calls ``register`` (entry point group ``vllm.general_plugins``) in each of its processes:
the API server, the engine core and every worker. It does nothing unless ``BATCHSCOPE_INGEST``
names Batchscope's ingest websocket (``ws://HOST:PORT/ingest``; the token in
``BATCHSCOPE_INGEST_TOKEN``), and it refuses, with one logged error, a vLLM release that no
adapter covers (adapters/). Otherwise it wraps ``Scheduler.__init__``: the process that builds a
scheduler (the engine core, one per data-parallel rank) installs the tap (tap.py) with its
release's adapter and starts a sender thread (sender.py). Other processes only carry the unused
wrapper. Nothing runs at import time.
"""
from __future__ import annotations

import atexit
import logging
import os

from . import adapters

__version__ = "0.2.0"
ENV_URL = "BATCHSCOPE_INGEST"
ENV_TOKEN = "BATCHSCOPE_INGEST_TOKEN"

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
    if adapters.release_of(vllm_version) not in adapters.RELEASES:
        tested = adapters.supported_range()
        return (f"batchscope-vllm {__version__} reads the scheduler internals of vLLM {tested} "
                f"and this is vLLM {vllm_version}; install a vLLM release in {tested} or a "
                "batchscope-vllm that supports this one")
    if not url.startswith(("ws://", "wss://")):
        return f"{ENV_URL}={url!r} is not a ws:// or wss:// URL"
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
        from .tap import SchedulerTap

        adapter = adapters.adapter_class(vllm.__version__)(scheduler)
        hello = {"token": token, "info": adapter.source_info(),
                 "engine": {"name": "vllm", "version": vllm.__version__, "pid": os.getpid(),
                            "data_parallel_rank": adapter.data_parallel_rank()}}
        sender = IngestSender(url, hello).start()
        SchedulerTap(scheduler, sender.submit, adapter).install()
        atexit.register(sender.close)
        log.info("Batchscope tap on (vLLM %s adapter, %s scheduling, rank %d): streaming every "
                 "engine step to %s", adapter.release, adapter.settings().scheduling,
                 adapter.data_parallel_rank(), url)
    except Exception:
        log.exception("Batchscope tap could not start; vLLM runs as usual")
