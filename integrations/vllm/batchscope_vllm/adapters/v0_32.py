"""vLLM 0.32: nothing the tap reads changed. (0.32 removed ``SchedulerOutput.block_table_updates``
and made ``num_common_prefix_blocks`` a deprecated, always-empty field; the tap reads the block
tables from the KV cache manager, not from the SchedulerOutput.)"""
from . import v0_31


class Adapter(v0_31.Adapter):
    RELEASE = (0, 32)
