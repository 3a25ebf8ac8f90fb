"""EngineConfig: every knob of the engine, validated once, resolved per device.

Frozen: an engine's config is replaced, never edited, so a reader on another thread (the
dashboard, the API) always sees one consistent config. Resolving it for a device and a model
gives a new config; so does a reconfiguration between steps (``reconfigured``), which also says
what it changed. What a step needs of it that may change between steps travels to the step
explicitly (``StepSettings``: the scheduler's policy, budget and chunking, the kernels' batch
invariance). Nothing rewrites a caller's setting silently: a setting that cannot hold is an
error, and the one adjustment made (a budget too small for a whole prompt without chunked
prefill) is logged and reported.
"""
from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

log = logging.getLogger(__name__)

POLICIES = ("mixed", "prefill_first")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLASH_ATTN_BLOCK = 256
MAX_AUTO_BLOCKS = 2048  # the default pool's cap: the per-block telemetry stays small
RECONFIGURABLE = ("policy", "max_num_batched_tokens", "enable_chunked_prefill", "batch_invariant")


def flash_attn_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


@dataclass(frozen=True)
class StepSettings:
    """What may change between steps (the presenter's controls), handed to each step."""

    policy: str
    token_budget: int
    chunked_prefill: bool
    batch_invariant: bool


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings. ``None`` means "choose for this device/model" (see ``resolve``)."""

    block_size: int | None = None
    num_kv_blocks: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None
    policy: str = "mixed"
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    device: str = "auto"
    attention_backend: str = "auto"
    seed: int = 0
    kv_cache_memory_gb: float | None = None
    cuda_graphs: bool | None = None  # decode-only steps replayed from CUDA graphs; None: on CUDA
    # Every request's logits the same bits alone or packed with any others, under any chunking
    # (the CPU kernels' one fixed order per row; engine/attention/cpu_backend.py). CPU only.
    batch_invariant: bool = False
    # A tokenizer directory other than the model's (vLLM's --tokenizer); None: the model's own.
    tokenizer: str | None = None

    @classmethod
    def from_kwargs(cls, **kwargs) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"EngineConfig: unknown option(s) {unknown}; known: {sorted(known)}")
        config = cls(**kwargs)
        config.validate()
        return config

    def validate(self) -> None:
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        for name in ("block_size", "num_kv_blocks", "max_model_len"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.kv_cache_memory_gb is not None and not self.kv_cache_memory_gb > 0:
            raise ValueError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
        self._check_budget_bound()
        _one_of("policy", self.policy, POLICIES)
        _one_of("dtype", self.dtype, ("auto", *DTYPES))
        _one_of("device", self.device, ("auto", "cpu", "cuda"))
        _one_of("attention_backend", self.attention_backend, ("auto", "torch", "cpu", "flash_attn"))
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device")
        if self.cuda_graphs is not None and not isinstance(self.cuda_graphs, bool):
            raise ValueError(f"cuda_graphs must be True, False or None, got {self.cuda_graphs!r}")
        if self.attention_backend == "flash_attn" and not flash_attn_available():
            raise ValueError("attention_backend='flash_attn' needs CUDA and the flash_attn package")
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "batch_invariant"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.batch_invariant and (self.device == "cuda" or self.attention_backend not in ("auto", "cpu")):
            raise ValueError("batch_invariant=True needs the CPU kernels: device 'cpu' and attention_backend 'auto' "
                             f"or 'cpu', got device={self.device!r}, attention_backend={self.attention_backend!r}")
        if self.tokenizer is not None and not tokenizer_files(Path(self.tokenizer)):
            raise ValueError(f"tokenizer {self.tokenizer!r} is not a directory with a tokenizer "
                             f"({', '.join(TOKENIZER_FILES)})")
        if self.attention_backend == "cpu" and self.device == "cuda":
            raise ValueError("attention_backend='cpu' runs on the CPU only, got device='cuda'")

    def for_device(self) -> EngineConfig:
        """This config with ``device``, ``dtype``, ``attention_backend`` and ``cuda_graphs``
        chosen where they are ``auto`` / None."""
        device = self.device if self.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
        dtype = self.dtype if self.dtype != "auto" else "bfloat16" if device == "cuda" else "float32"
        backend = self.attention_backend
        if backend == "auto":
            backend = "cpu" if device == "cpu" else "flash_attn" if flash_attn_available() else "torch"
        elif backend == "cpu" and device != "cpu":
            raise ValueError(f"attention_backend='cpu' runs on the CPU only, got device={device!r}")
        graphs = device == "cuda" if self.cuda_graphs is None else self.cuda_graphs
        if graphs and device != "cuda":
            raise ValueError(f"cuda_graphs=True needs device='cuda', got device={device!r}")
        if self.batch_invariant and device != "cpu":
            raise ValueError(f"batch_invariant=True needs device='cpu', got device={device!r}")
        return replace(self, device=device, dtype=dtype, attention_backend=backend, cuda_graphs=graphs)

    def for_model(self, model_max_len: int, bytes_per_token: int) -> EngineConfig:
        """This config (resolved for its device) with block size, model length and pool size
        chosen from the model's shapes where they are None."""
        block_size = self.block_size or (FLASH_ATTN_BLOCK if self.attention_backend == "flash_attn" else 16)
        max_model_len = self.max_model_len or min(model_max_len, 4096)
        if max_model_len > model_max_len:
            raise ValueError(f"max_model_len={max_model_len} exceeds the model's limit {model_max_len}")
        sized = replace(self, block_size=block_size, max_model_len=max_model_len)
        sized = replace(sized, num_kv_blocks=self.num_kv_blocks or sized._pool_blocks(bytes_per_token))
        sized._check_budget_bound()
        budget = sized.whole_prompt_budget()
        if budget != self.max_num_batched_tokens:
            log.warning("max_num_batched_tokens %d raised to %d: without chunked prefill a whole prompt "
                        "(up to max_model_len) must fit one step", self.max_num_batched_tokens, budget)
        return replace(sized, max_num_batched_tokens=budget)

    def _pool_blocks(self, bytes_per_token: int) -> int:
        """Enough blocks for every sequence at full length; with the default memory also few
        enough that the per-block telemetry (KV pool map) stays small. Memory asked for
        explicitly (serving, benchmarks) is honoured."""
        default_gb = 4.0 if self.device == "cuda" else 0.5
        budget = int((self.kv_cache_memory_gb or default_gb) * 2**30)
        by_memory = budget // (bytes_per_token * self.block_size)
        by_use = -(-self.max_num_seqs * self.max_model_len // self.block_size)
        cap = MAX_AUTO_BLOCKS if self.kv_cache_memory_gb is None else by_use
        return max(min(by_memory, by_use, cap), 1)

    @property
    def max_token_budget(self) -> int | None:
        """The largest token budget that can still change a schedule: a step holds at most
        ``max_num_seqs`` requests of at most ``max_model_len`` tokens each (None until
        ``max_model_len`` is known). A larger budget is refused, not lowered: it changes nothing,
        so it can only be a slip (99,999,999). It is never below a whole prompt's budget."""
        return None if self.max_model_len is None else self.max_num_seqs * self.max_model_len

    def _check_budget_bound(self) -> None:
        cap = self.max_token_budget
        if cap is not None and self.max_num_batched_tokens > cap:
            raise ValueError(f"max_num_batched_tokens must be at most {cap} (max_num_seqs {self.max_num_seqs} "
                             f"times max_model_len {self.max_model_len}), got {self.max_num_batched_tokens}")

    def whole_prompt_budget(self) -> int:
        """The token budget this config runs with: without chunked prefill a whole prompt must
        fit one step, so a smaller budget is raised to ``max_model_len``."""
        if self.max_model_len is None:  # (not resolved for a model yet)
            return self.max_num_batched_tokens
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            return self.max_model_len
        return self.max_num_batched_tokens

    def reconfigured(self, **changes) -> tuple[EngineConfig, dict[str, tuple]]:
        """A new config with ``changes`` (RECONFIGURABLE settings only, validated) and what
        changed, ``{name: (before, after)}``, the budget raised to fit a whole prompt included."""
        unknown = sorted(set(changes) - set(RECONFIGURABLE))
        if unknown:
            raise ValueError(f"reconfigure: cannot change {unknown}; allowed: {RECONFIGURABLE}")
        new = replace(self, **changes)
        new.validate()
        new = replace(new, max_num_batched_tokens=new.whole_prompt_budget())
        changed = {name: (getattr(self, name), getattr(new, name)) for name in RECONFIGURABLE
                   if getattr(self, name) != getattr(new, name)}
        return new, changed

    @property
    def step_settings(self) -> StepSettings:
        return StepSettings(self.policy, self.max_num_batched_tokens, self.enable_chunked_prefill,
                            self.batch_invariant)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def tokenizer_files(directory: Path) -> list[str]:
    """The tokenizer files ``directory`` holds (none where it is not a directory)."""
    return [name for name in TOKENIZER_FILES if (directory / name).is_file()]


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
