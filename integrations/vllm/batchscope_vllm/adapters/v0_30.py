"""vLLM 0.30: the reads of ``base.SchedulerAdapter`` as they are."""
from .base import SchedulerAdapter


class Adapter(SchedulerAdapter):
    RELEASE = (0, 30)
