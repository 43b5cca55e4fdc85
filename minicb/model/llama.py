"""A Llama-family decoder over a flat batch: Llama, Mistral, Qwen2 and Qwen3 in one file.

The forward takes T tokens from any number of sequences, flattened: `input_ids (T,)`,
`positions (T,)` and the AttentionMetadata that says which tokens belong together. Embedding,
norms, projections and the MLP treat the T tokens as one big matrix (selective batching's shared
part); only attention looks at sequences, and it does so through a pluggable backend.
"""
from __future__ import annotations

import torch
from torch import nn

from minicb.attention import AttentionBackend
from minicb.attention.metadata import AttentionMetadata
from minicb.model.config import ModelConfig, rope_inverse_frequencies


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 even for fp16/bf16 weights: the mean of squares overflows in fp16.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.float()[:, None] * self.inv_freq[None, :]   # (T, hd/2)
        angles = torch.cat([angles, angles], dim=-1)                    # (T, hd)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (i, i + hd/2) pair of x (T, heads, hd) by its position's angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.scale = c.head_dim ** -0.5
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.kv_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.kv_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, backend: AttentionBackend) -> torch.Tensor:
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)      # (T, H, hd)
        k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)   # (T, n_kv, hd)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)   # (T, n_kv, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = backend(q, k, v, k_cache, v_cache, meta, self.scale)      # (T, H, hd)
        return self.o_proj(out.reshape(T, -1))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, k_cache, v_cache, meta, backend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache, meta, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """Named like HF's `model.*` submodule, so checkpoint keys load without renaming."""

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
        cos, sin = self.rotary(positions, x.dtype)                     # (T, hd) each
        for layer, layer_cache in zip(self.model.layers, kv_cache):
            x = layer(x, cos, sin, layer_cache[0], layer_cache[1], meta, backend)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Only the rows that need a next token come here: (B, d) -> (B, vocab), in fp32 for sampling."""
        return self.lm_head(hidden).float()
