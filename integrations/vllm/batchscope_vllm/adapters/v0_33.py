"""vLLM 0.33: nothing the tap reads changed. (0.33 added ``SchedulerOutput.encoder_input_updates``
and ``skip_drafts``, ``SchedulerInterface.has_request()``, and the V2 model runner as an option
on CUDA: its ``ModelRunnerOutput.req_ids`` is its batch order, decodes first, then short extends,
then prefills, which the records follow as they follow V1's persistent batch order.)"""
from . import v0_32


class Adapter(v0_32.Adapter):
    RELEASE = (0, 33)
