"""Reference attention in plain PyTorch: write K/V into the paged cache, then attend per sequence.

This is Orca's selective batching in its plainest form. Every other layer ran over all T tokens
at once; attention cannot, because each sequence has its own context length, so it loops over
the B sequences. Each one reads its own context through its block table.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from minicb.attention.metadata import AttentionMetadata


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Scatter the new tokens' K/V (T, n_kv, hd) into caches (num_blocks, block_size, n_kv, hd)."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:])[slots] = k[keep]
    v_cache.view(-1, *v_cache.shape[2:])[slots] = v[keep]


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A sequence's first seq_len cached rows, (seq_len, n_kv, hd), read block by block."""
    block_size = cache.shape[1]
    blocks = block_table[: (seq_len + block_size - 1) // block_size].long()
    return cache[blocks].flatten(0, 1)[:seq_len]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q (T, H, hd), k/v (T, n_kv, hd) for the new tokens -> attention output (T, H, hd)."""
    store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
    out = torch.empty_like(q)
    cu = meta.cu_seqlens_q.tolist()
    for i, seq_len in enumerate(meta.seq_lens.tolist()):
        start, end = cu[i], cu[i + 1]
        keys = gather_context(k_cache, meta.block_tables[i], seq_len)     # (S, n_kv, hd)
        values = gather_context(v_cache, meta.block_tables[i], seq_len)   # (S, n_kv, hd)
        query = q[start:end]                                              # (t, H, hd)
        # The t new tokens are the last t of the context: token j sees keys 0 .. seq_len - t + j.
        q_pos = torch.arange(seq_len - (end - start), seq_len, device=q.device)
        visible = torch.arange(seq_len, device=q.device)[None, :] <= q_pos[:, None]  # (t, S)
        out[start:end] = F.scaled_dot_product_attention(
            query.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1),
            attn_mask=visible, scale=scale, enable_gqa=True).transpose(0, 1)
    return out
