"""Reference attention in plain PyTorch: write K/V into the paged cache, then attend per sequence.

This is Orca's selective batching in its plainest form. Every other layer ran over all T tokens
at once; attention cannot, because each sequence has its own context length, so it loops over
the B sequences. Each one reads its own context through its block table.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from minicb.attention.metadata import AttentionMetadata


def written_rows(meta: AttentionMetadata) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The rows of the batch whose K/V are stored (slot >= 0; padding is not), None for all of them, and
    their slots. Built once per step: every layer stores to the same slots."""
    if "written" not in meta.derived:
        written = meta.slot_mapping >= 0
        rows = None if bool(written.all()) else written.nonzero()[:, 0]      # (T',)
        meta.derived["written"] = rows, meta.slot_mapping if rows is None else meta.slot_mapping[rows]
    return meta.derived["written"]


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             meta: AttentionMetadata) -> None:
    """Scatter the new tokens' K/V (T, n_kv, hd) into caches (num_blocks, block_size, n_kv, hd)."""
    rows, slots = written_rows(meta)
    k_cache.flatten(0, 1).index_copy_(0, slots, k if rows is None else k[rows])
    v_cache.flatten(0, 1).index_copy_(0, slots, v if rows is None else v[rows])


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A sequence's first seq_len cached rows, (seq_len, n_kv, hd), read block by block."""
    block_size = cache.shape[1]
    blocks = block_table[: (seq_len + block_size - 1) // block_size].long()
    return cache[blocks].flatten(0, 1)[:seq_len]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q (T, H, hd), k/v (T, n_kv, hd) for the new tokens -> attention output (T, H, hd)."""
    store_kv(k, v, k_cache, v_cache, meta)
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


def dense_layout(meta: AttentionMetadata, block_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Index tensors that lay the ragged batch out densely, and the mask as SDPA adds it (0 or -inf, in the
    queries' dtype, so SDPA need not convert a boolean one in every layer). They depend only on the
    metadata, so they are built once per step and reused by every layer."""
    key = ("dense", block_size, dtype)
    if key not in meta.derived:
        B, S, Q = meta.num_seqs, meta.max_seq_len, meta.max_query_len
        device = meta.seq_lens.device
        lens = meta.seq_lens.long()
        pos = torch.arange(S, device=device)
        # Past its end a sequence reads its own first slot again. Any other slot might hold a stale NaN of
        # another request, and though the mask gives it weight 0, 0 * NaN is NaN. Its own is finite.
        read = torch.where(pos[None, :] < lens[:, None], pos[None, :], 0)                        # (B, S)
        context_slots = meta.block_tables.long().gather(1, read // block_size) * block_size + read % block_size
        q_lens = (meta.cu_seqlens_q[1:] - meta.cu_seqlens_q[:-1]).long()                        # (B,)
        seq_of_row = torch.repeat_interleave(torch.arange(B, device=device), q_lens)            # (T,)
        row_in_seq = torch.arange(len(seq_of_row), device=device) - meta.cu_seqlens_q[:-1].long()[seq_of_row]
        q_pos = (lens - q_lens)[:, None] + torch.arange(Q, device=device)[None, :]              # (B, Q)
        visible = pos[None, None, :] <= q_pos[:, :, None]                                        # (B, Q, S)
        mask = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, float("-inf"))
        meta.derived[key] = (context_slots, seq_of_row, row_in_seq, mask[:, None])              # mask (B, 1, Q, S)
    return meta.derived[key]


def split_decodes(meta: AttentionMetadata) -> list[tuple[torch.Tensor, AttentionMetadata]] | None:
    """A step with both one-token (decode) and longer (prefill) sequences as two batches of their own: padded
    together, every decode row would be padded to the longest prompt chunk, and a SmolLM2 step of 15 decodes
    and one 40-token prompt spent 6x longer in attention. Each part: its rows of the batch, its metadata.
    None when the step holds one kind only. Built once per step."""
    if "parts" not in meta.derived:
        q_lens = meta.cu_seqlens_q[1:] - meta.cu_seqlens_q[:-1]                                   # (B,)
        single = q_lens == 1
        mixed = meta.max_query_len > 1 and bool(single.any())
        meta.derived["parts"] = [sub_batch(meta, single.nonzero()[:, 0], q_lens),
                                 sub_batch(meta, (~single).nonzero()[:, 0], q_lens)] if mixed else None
    return meta.derived["parts"]


def sub_batch(meta: AttentionMetadata, seqs: torch.Tensor,
              q_lens: torch.Tensor) -> tuple[torch.Tensor, AttentionMetadata]:
    """The batch rows of the given sequences, and the metadata of those sequences alone."""
    q_lens, seq_lens = q_lens[seqs], meta.seq_lens[seqs]
    cu = F.pad(q_lens.cumsum(0), (1, 0)).to(torch.int32)                                          # (b+1,)
    rows = (torch.repeat_interleave(meta.cu_seqlens_q[:-1][seqs] - cu[:-1], q_lens)
            + torch.arange(int(cu[-1]), device=cu.device)).long()                                 # (t,)
    part = AttentionMetadata(cu_seqlens_q=cu, seq_lens=seq_lens, block_tables=meta.block_tables[seqs],
                             slot_mapping=meta.slot_mapping[rows], max_query_len=int(q_lens.max()),
                             max_seq_len=int(seq_lens.max()))
    return rows, part


def paged_attention_vectorized(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                               v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """The same attention as paged_attention, in one SDPA call for the whole batch (two in a step that mixes
    decodes and prompts: split_decodes).

    Every sequence's context is gathered through its block table into one padded tensor
    (B, max_seq_len, n_kv, hd), and the queries into (B, max_query_len, H, hd); a mask hides
    the padding and the future. It computes on padding, but the CPU prefers one big call to B
    small ones. The Triton kernels of lesson 05 get both: one launch and no padding.
    """
    store_kv(k, v, k_cache, v_cache, meta)
    parts = split_decodes(meta)
    if parts is None:
        return attend_padded(q, k_cache, v_cache, meta, scale)
    out = torch.empty_like(q)
    for rows, part in parts:
        out[rows] = attend_padded(q[rows], k_cache, v_cache, part, scale)
    return out


def attend_padded(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                  scale: float) -> torch.Tensor:
    """q (T, H, hd) against the cached contexts, laid out densely -> (T, H, hd)."""
    context_slots, seq_of_row, row_in_seq, mask = dense_layout(meta, k_cache.shape[1], q.dtype)
    B, S = context_slots.shape
    keys = k_cache.flatten(0, 1).index_select(0, context_slots.flatten()).view(B, S, *k_cache.shape[2:])
    values = v_cache.flatten(0, 1).index_select(0, context_slots.flatten()).view(B, S, *v_cache.shape[2:])
    keys, values = keys.transpose(1, 2), values.transpose(1, 2)                   # (B, n_kv, S, hd)
    if meta.max_query_len == 1:   # decodes only: the query heads that share a KV head are its rows
        n_kv, hd = k_cache.shape[2:]
        out = F.scaled_dot_product_attention(q.reshape(B, n_kv, -1, hd), keys, values, attn_mask=mask, scale=scale)
        return out.reshape(q.shape)                                               # (B, H, hd)
    queries = q.new_zeros(B, meta.max_query_len, *q.shape[1:])                    # (B, Q, H, hd)
    queries[seq_of_row, row_in_seq] = q
    out = F.scaled_dot_product_attention(queries.transpose(1, 2), keys, values, attn_mask=mask, scale=scale,
                                         enable_gqa=True).transpose(1, 2)        # (B, Q, H, hd)
    return out[seq_of_row, row_in_seq]                                            # (T, H, hd)
