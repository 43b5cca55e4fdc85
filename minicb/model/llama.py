"""A Llama-family decoder over a flat batch: Llama, Mistral, Qwen2 and Qwen3 in one file.

The forward takes T tokens from any number of sequences, flattened: `input_ids (T,)`,
`positions (T,)` and the AttentionMetadata that says which tokens belong together. Embedding,
norms, projections and the MLP treat the T tokens as one big matrix (selective batching's shared
part); only attention looks at sequences, and it does so through a pluggable backend.

On a CPU a small model's step is mostly the fixed cost of launching ops, not arithmetic, so the
forward launches few of them: Q, K and V come from one fused projection and gate and up from another
(the loader concatenates the checkpoint's separate weights), RoPE's angles are computed once per step
and rotate Q and K together, and RMSNorm is one library call.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minicb.attention import AttentionBackend
from minicb.attention.metadata import AttentionMetadata
from minicb.model.config import ModelConfig, rope_inverse_frequencies

# Fused parameter -> the checkpoint's tensors it concatenates along the output dimension, in order.
FUSED_PROJECTIONS = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                     "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Normalise fp16/bf16 in fp32, as the checkpoints were trained: the mean of squares overflows in fp16.
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and a signed sin, (T, 1, hd) each, for apply_rotary: computed once per step, used by every layer."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]   # (T, hd/2)
        cos, sin = angles.cos(), angles.sin()
        return torch.cat([cos, cos], -1)[:, None].to(dtype), torch.cat([-sin, sin], -1)[:, None].to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (i, i + hd/2) pair of x (T, heads, hd) by its position's angle: x * cos + (-x2, x1) * sin.
    Rolling x by hd/2 gives (x2, x1), and signed_sin holds -sin on the first half: four ops, no slicing, two of
    them in place (a prompt's fresh buffers cost page faults)."""
    return (x * cos).add_(x.roll(x.shape[-1] // 2, dims=-1).mul_(signed_sin))


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.scale = c.head_dim ** -0.5
        self.qkv_proj = nn.Linear(c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * c.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, backend: AttentionBackend) -> torch.Tensor:
        T, H, n_kv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(T, H + 2 * n_kv, self.head_dim)      # (T, H + 2 n_kv, hd): q heads, k, v
        if self.q_norm is not None:
            qkv[:, :H] = self.q_norm(qkv[:, :H])
            qkv[:, H:H + n_kv] = self.k_norm(qkv[:, H:H + n_kv])
        q, k = apply_rotary(qkv[:, :H + n_kv], cos, sin).split([H, n_kv], dim=1)  # (T, H, hd), (T, n_kv, hd)
        v = qkv[:, H + n_kv:]                                             # (T, n_kv, hd)
        out = backend(q, k, v, k_cache, v_cache, meta, self.scale)      # (T, H, hd)
        return self.o_proj(out.reshape(T, -1))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.gate_up_proj = nn.Linear(c.hidden_size, 2 * c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)                  # (T, ffn) each
        return self.down_proj(F.silu(gate).mul_(up))                      # SwiGLU


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, k_cache, v_cache, meta, backend) -> torch.Tensor:
        # The residual adds into each block's fresh output: the same sums, two buffers fewer.
        x = self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache, meta, backend).add_(x)
        return self.mlp(self.post_attention_layernorm(x)).add_(x)


class Backbone(nn.Module):
    """Named like HF's `model.*` submodule, so checkpoint keys load without renaming (bar the fused ones)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.rotary = RotaryEmbedding(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_cache: torch.Tensor, backend: AttentionBackend) -> torch.Tensor:
        """input_ids, positions (T,); kv_cache (L, 2, num_blocks, block_size, n_kv, hd) -> hidden (T, d)."""
        x = self.model.embed_tokens(input_ids)                         # (T, d)
        cos, sin = self.rotary(positions, x.dtype)                     # (T, 1, hd) each
        for layer, layer_cache in zip(self.model.layers, kv_cache):
            x = layer(x, cos, sin, layer_cache[0], layer_cache[1], meta, backend)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Only the rows that need a next token come here: (B, d) -> (B, vocab), in fp32 for sampling."""
        return self.lm_head(hidden).float()
