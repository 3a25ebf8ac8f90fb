"""EngineConfig: every knob of the engine, validated once, resolved per device."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields

import torch

POLICIES = ("mixed", "prefill_first")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLASH_ATTN_BLOCK = 256
MAX_AUTO_BLOCKS = 2048  # the default pool's cap: the per-block telemetry stays small


def flash_attn_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


@dataclass
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
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(f"batch_invariant must be True or False, got {self.batch_invariant!r}")
        if self.batch_invariant and (self.device == "cuda" or self.attention_backend not in ("auto", "cpu")):
            raise ValueError("batch_invariant=True needs the CPU kernels: device 'cpu' and attention_backend 'auto' "
                             f"or 'cpu', got device={self.device!r}, attention_backend={self.attention_backend!r}")
        if self.attention_backend == "cpu" and self.device == "cuda":
            raise ValueError("attention_backend='cpu' runs on the CPU only, got device='cuda'")

    def resolve_device(self) -> None:
        """Fill ``device``, ``dtype`` and ``attention_backend`` when they are ``auto``."""
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.dtype == "auto":
            self.dtype = "bfloat16" if self.device == "cuda" else "float32"
        if self.attention_backend == "auto":
            use_fa = self.device == "cuda" and flash_attn_available()
            self.attention_backend = "flash_attn" if use_fa else "torch" if self.device == "cuda" else "cpu"
        elif self.attention_backend == "cpu" and self.device != "cpu":
            raise ValueError(f"attention_backend='cpu' runs on the CPU only, got device={self.device!r}")
        if self.cuda_graphs is None:
            self.cuda_graphs = self.device == "cuda"
        elif self.cuda_graphs and self.device != "cuda":
            raise ValueError(f"cuda_graphs=True needs device='cuda', got device={self.device!r}")
        if self.batch_invariant and self.device != "cpu":
            raise ValueError(f"batch_invariant=True needs device='cpu', got device={self.device!r}")

    def resolve_sizes(self, model_max_len: int, bytes_per_token: int) -> None:
        """Fill block size, model length and pool size from the model's shapes."""
        if self.block_size is None:
            self.block_size = FLASH_ATTN_BLOCK if self.attention_backend == "flash_attn" else 16
        if self.max_model_len is None:
            self.max_model_len = min(model_max_len, 4096)
        elif self.max_model_len > model_max_len:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's limit {model_max_len}"
            )
        self.ensure_whole_prompts_fit()
        if self.num_kv_blocks is None:
            default_gb = 4.0 if self.device == "cuda" else 0.5
            budget = int((self.kv_cache_memory_gb or default_gb) * 2**30)
            by_memory = budget // (bytes_per_token * self.block_size)
            # Enough for every sequence at full length; with the default memory also few enough
            # that the per-block telemetry (KV pool map) stays small. Memory asked for explicitly
            # (serving, benchmarks) is honoured.
            by_use = -(-self.max_num_seqs * self.max_model_len // self.block_size)
            cap = MAX_AUTO_BLOCKS if self.kv_cache_memory_gb is None else by_use
            self.num_kv_blocks = max(min(by_memory, by_use, cap), 1)

    def ensure_whole_prompts_fit(self) -> None:
        """Without chunked prefill a whole prompt must fit one step's token budget."""
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            self.max_num_batched_tokens = self.max_model_len

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
