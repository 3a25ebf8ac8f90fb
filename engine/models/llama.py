"""The Llama family on packed tokens: ``[num_rows, hidden]`` plus positions, no batch axis.

Covers Llama 2/3 (any rope scaling transformers knows), Mistral (full attention), Qwen2/2.5
(q/k/v bias), Qwen3 (per-head q/k RMSNorm, explicit head_dim) and SmolLM2. Every linear layer
is one matmul over all rows of all requests; q/k/v and gate/up are fused so each layer runs
four GEMMs. Only attention looks at request boundaries, through the backend and its plan.
The rotary tables come from the transformers model's own rotary module, so positions are
encoded exactly as transformers encodes them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import cpu_kernels
from .fused_layers import FusedLayers
from .prepacked import make_linear, prepack_linears, prepack_supported

LOGITS_SLICE = 4096  # vocabulary rows per LM-head GEMM on CPU
SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.fused_weight: torch.Tensor | None = None  # set: the CPU kernel, on fp32 [rows, size]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_weight is not None:
            return cpu_kernels.add_rms_norm(x, None, self.fused_weight, self.eps)
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)
        return self.weight * normed

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(x + delta), x + delta)``; fused, the sum is written into ``x``."""
        if self.fused_weight is not None:
            return cpu_kernels.add_rms_norm(x, delta, self.fused_weight, self.eps), x
        x = x + delta
        return self(x), x


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` with its first half negated, so that ``rotate`` needs no negation of ``x``:
    ``cat(-x2, x1) * sin == cat(x2, x1) * signed_sin(sin)`` exactly (negation is exact)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on ``[rows, heads, head_dim]`` with ``cos`` and ``signed_sin(sin)``
    ``[rows, 1, head_dim]``: transformers' ``x * cos + rotate_half(x) * sin``, same rounding."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * sin_signed


class Attention(nn.Module):
    def __init__(self, config, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.scale = self.head_dim**-0.5
        bias = bool(getattr(config, "attention_bias", False)) or config.model_type == "qwen2"
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.sizes = (q_size, kv_size, kv_size)
        self.qkv_proj = nn.Linear(config.hidden_size, q_size + 2 * kv_size, bias=bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=bool(getattr(config, "attention_bias", False)))
        self.qk_norm = config.model_type == "qwen3"
        self.fused_rotary = False  # the CPU kernel (cpu_kernels.rotary), in place on the projection
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x, cos, sin, step) -> torch.Tensor:
        rows = x.shape[0]
        qkv = self.qkv_proj(x)
        q_size, kv_size, _ = self.sizes
        v = qkv[:, q_size + kv_size:].view(rows, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.q_norm(qkv[:, :q_size].view(rows, self.num_heads, self.head_dim))
            k = self.k_norm(qkv[:, q_size:q_size + kv_size].view(rows, self.num_kv_heads, self.head_dim))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        else:  # q and k side by side in the fused output: one rotary pass over all their heads
            qk = qkv[:, :q_size + kv_size].view(rows, -1, self.head_dim)
            if self.fused_rotary:
                cpu_kernels.rotary(qk, cos, sin)  # in place: the same bits as ``rotate``
            else:
                qk = rotate(qk, cos, sin)
            q, k = qk.split((self.num_heads, self.num_kv_heads), dim=1)
        out = step.attend(self.layer_index, q, k, v, self.scale)
        return self.o_proj(out.reshape(rows, -1))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.intermediate = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * self.intermediate, bias=bias)
        self.down_proj = nn.Linear(self.intermediate, config.hidden_size, bias=bias)
        self.fused = False  # the CPU kernel (cpu_kernels.silu_mul)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.fused:
            return self.down_proj(cpu_kernels.silu_mul(gate_up))
        gate, up = gate_up.split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, step, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` after the layer; with ``keep`` (the last layer), only those rows go on past attention:
        every row's keys and values are written and attended, but the other rows would only feed
        logits nobody samples (a prompt's rows before its last)."""
        attn = self.self_attn(self.input_layernorm(x), cos, sin, step)
        if keep is not None:
            x, attn = x[keep], attn[keep]
        h, x = self.post_attention_layernorm.add_norm(x, attn)
        return x + self.mlp(h)


class PackedLlama(nn.Module):
    def __init__(self, config, rotary_emb: nn.Module, max_positions: int):
        super().__init__()
        architectures = getattr(config, "architectures", None) or ["LlamaForCausalLM"]
        if architectures[0] not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {architectures[0]!r}; supported: {SUPPORTED_ARCHITECTURES}"
            )
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r}; supported: 'silu'")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        self.lm_head = None if self.tied else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.packed_lm_head: nn.Module | None = None  # the LM head packed for the CPU (prepacked.py)
        self.activation_dtype: torch.dtype | None = None  # None: the weights' dtype
        self.fused_layers: FusedLayers | None = None  # every layer one C call (fused_layers.py)
        with torch.no_grad():
            positions = torch.arange(max_positions)[None]
            cos, sin = rotary_emb(torch.zeros(1, dtype=torch.float32), positions)
        # Plain fp32 attributes, not buffers: ``.to(dtype)`` must not round the tables. The sine
        # table is stored as ``signed_sin`` (what ``rotate`` takes).
        self.cos_table, self.sin_table = cos[0].float(), signed_sin(sin[0].float())

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, step,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states ``[rows, hidden]`` after the final norm, for every packed row, or for the rows
        ``keep`` (increasing indices: those that need logits), which alone run the last layer past
        its attention (2.8-3.9% of a prefill's linear work at 30-24 layers)."""
        x = self.embed_tokens(input_ids).to(self.activation_dtype or self.embed_tokens.weight.dtype)
        cos = self.cos_table[positions].to(x.dtype)[:, None, :]
        sin = self.sin_table[positions].to(x.dtype)[:, None, :]
        if self.fused_layers is not None and step.backend.name == "cpu":
            x = self.fused_layers(x, cos, sin, step, keep)
        else:
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, step, keep if i == len(self.layers) - 1 else None)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the given rows. Without prepacked weights the CPU does the vocabulary in
        slices: one MKL GEMM over a 49k x hidden weight streams badly (1.6x slower at 8 rows)."""
        if self.packed_lm_head is not None:
            return self.packed_lm_head(hidden).float()
        weight = self.embed_tokens.weight if self.tied else self.lm_head.weight
        if hidden.device.type != "cpu":
            return F.linear(hidden, weight).float()
        return torch.cat([F.linear(hidden, part) for part in weight.split(LOGITS_SLICE)], dim=-1).float()

    @torch.no_grad()
    def prepack_for_cpu(self, kernels: bool = False) -> bool:
        """On CPU, pack every linear layer and the LM head once (``prepacked.py``): for the C
        kernel when ``kernels`` (the CPU kernels are on and built), else for oneDNN where this CPU
        supports the dtype; call once the weights are final. With kernels, the norms and SiLU are
        fused too (``fuse_cpu_ops``). With tied embeddings the packed LM head is a second copy of
        the embedding (113 MB for SmolLM2-135M in fp32): the lookup needs the plain layout, the
        GEMM the packed one."""
        weight = self.embed_tokens.weight if self.tied else self.lm_head.weight
        kernels = kernels and weight.device.type == "cpu" and cpu_kernels.load() is not None
        if weight.device.type != "cpu" or not (kernels or prepack_supported(weight.dtype)):
            return False
        self.packed_lm_head = make_linear(weight, None, kernels)
        self.lm_head = None
        prepack_linears(self.layers, kernels)
        if weight.dtype != torch.float32:
            # bf16 weights, fp32 activations: torch's CPU element-wise kernels (norms, rotary,
            # SiLU, residuals) run 2-4x slower on bf16 than on fp32, more than the bf16 GEMMs save.
            self.activation_dtype = torch.float32
        if kernels:
            self.fuse_cpu_ops()
        return True

    def fuse_cpu_ops(self) -> bool:
        """Norms, rotary and SiLU through the fused CPU kernels (``cpu_kernels.py``) where they
        apply: fp32 activations and sizes in whole 16-float vectors."""
        sizes = (self.config.hidden_size, self.config.intermediate_size)
        if (self.activation_dtype or self.embed_tokens.weight.dtype) != torch.float32 or any(n % 16 for n in sizes):
            return False
        norms = [self.norm]
        for layer in self.layers:
            norms += [layer.input_layernorm, layer.post_attention_layernorm]
        for norm in norms:  # (Qwen3's per-head q/k norms stay torch's: they take 3-D views)
            norm.fused_weight = norm.weight.detach().float().contiguous()
        for layer in self.layers:
            layer.mlp.fused = True
            layer.self_attn.fused_rotary = layer.self_attn.head_dim % 32 == 0  # halves in whole vectors
        self.fused_layers = FusedLayers.of(self.layers)
        return True

    @torch.no_grad()
    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy a transformers ``*ForCausalLM`` state dict in, fusing q/k/v and gate/up."""
        def take(name: str) -> torch.Tensor:
            if name not in state:
                raise ValueError(f"checkpoint is missing weight {name!r}")
            return state[name]

        self.embed_tokens.weight.copy_(take("model.embed_tokens.weight"))
        self.norm.weight.copy_(take("model.norm.weight"))
        if not self.tied:
            self.lm_head.weight.copy_(take("lm_head.weight"))
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            attn = layer.self_attn
            for part in ("weight", "bias"):
                fused = getattr(attn.qkv_proj, part)
                if fused is not None:
                    fused.copy_(torch.cat([take(f"{p}self_attn.{n}_proj.{part}") for n in "qkv"]))
                if getattr(attn.o_proj, part) is not None:
                    getattr(attn.o_proj, part).copy_(take(f"{p}self_attn.o_proj.{part}"))
                gate_up = getattr(layer.mlp.gate_up_proj, part)
                if gate_up is not None:
                    gate_up.copy_(torch.cat([take(f"{p}mlp.{n}_proj.{part}") for n in ("gate", "up")]))
                    getattr(layer.mlp.down_proj, part).copy_(take(f"{p}mlp.down_proj.{part}"))
            if attn.qk_norm:
                attn.q_norm.weight.copy_(take(f"{p}self_attn.q_norm.weight"))
                attn.k_norm.weight.copy_(take(f"{p}self_attn.k_norm.weight"))
            layer.input_layernorm.weight.copy_(take(f"{p}input_layernorm.weight"))
            layer.post_attention_layernorm.weight.copy_(take(f"{p}post_attention_layernorm.weight"))
