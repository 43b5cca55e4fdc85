"""Decode attention that reads the paged KV cache in place: PyTorch's FlexAttention, compiled.

The torch backend copies every sequence's context out of the cache in every layer. Here each sequence's
query attends over the whole pool, and a block mask, made from the block tables, admits only the
sequence's own blocks: the full ones whole, the last one up to the sequence's end. Steps with a prompt
in them, and steps of few sequences, take the torch backend.
"""
from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from minicb.attention.metadata import AttentionMetadata
from minicb.attention.torch_backend import paged_attention_vectorized, store_kv

# Below this many sequences the torch backend is faster: a compiled call costs about 0.3 ms of guards and
# dispatch in every layer (SmolLM2 on 2 cores: flex 7% slower at 16 sequences, 9% faster at 64).
MIN_SEQS = 32


@functools.cache
def compiled_flex():
    """flex_attention compiled once per process (and cached on disk by inductor across processes). Shapes are
    static: the rows are padded to the engine's seats, so a step's batch size never recompiles."""
    return torch.compile(flex_attention, dynamic=False)


def decode_block_mask(meta: AttentionMetadata, block_size: int, num_blocks: int, rows: int,
                      tile: int) -> tuple[BlockMask, torch.Tensor]:
    """Row b admits the full blocks of sequence b and, masked to its end, its last block; rows past the
    batch admit nothing. With it, the slots of each last block past its sequence's end. Built once per step,
    shared by every layer."""
    key = ("flex", block_size, num_blocks, rows, tile)
    if key not in meta.derived:
        B, M = meta.block_tables.shape
        device = meta.seq_lens.device
        lens = meta.seq_lens.long()
        used = (lens + block_size - 1) // block_size                                  # (B,) blocks per sequence
        last_len = torch.zeros(rows, dtype=torch.long, device=device)
        last_len[:B] = lens - (used - 1) * block_size                                 # tokens in the last block
        counts = torch.zeros(2, rows, dtype=torch.int32, device=device)
        counts[0, :B], counts[1, :B] = used - 1, 1                                    # full blocks, the last
        indices = torch.zeros(2, rows, num_blocks, dtype=torch.int32, device=device)  # (full | last, rows, blocks)
        indices[0, :B, :M] = meta.block_tables
        indices[1, :B, 0] = meta.block_tables.gather(1, (used - 1)[:, None])[:, 0]

        def within_last_block(b, h, q_idx, kv_idx):
            return kv_idx % block_size < last_len[b]

        # BLOCK_SIZE is (query rows, KV tokens) per tile: all of a row's queries, one KV block.
        mask = BlockMask.from_kv_blocks(
            counts[1, :, None, None], indices[1, :, None, None], counts[0, :, None, None], indices[0, :, None, None],
            BLOCK_SIZE=(tile, block_size), mask_mod=within_last_block, seq_lengths=(tile, num_blocks * block_size),
            compute_q_blocks=False)
        # The last block's slots past a sequence's end hold stale values, maybe another request's NaN: the
        # mask gives them weight 0, but 0 * NaN is NaN, so they are zeroed (no other sequence reads them).
        # Stale keys need nothing: the mask replaces their scores.
        pos = torch.arange(block_size, device=device)
        tail = pos[None, :] >= last_len[:B, None]                                     # (B, block_size)
        starts = indices[1, :B, :1].long() * block_size                               # (B, 1)
        meta.derived[key] = mask, (starts + pos[None, :])[tail]                       # (stale slots,)
    return meta.derived[key]


def flex_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                          v_cache: torch.Tensor, meta: AttentionMetadata, scale: float, *, rows: int) -> torch.Tensor:
    """q (T, H, hd), k/v (T, n_kv, hd) -> (T, H, hd), as paged_attention_vectorized; `rows`: the engine's seats."""
    if meta.max_query_len > 1 or not MIN_SEQS <= meta.num_seqs <= rows:
        return paged_attention_vectorized(q, k, v, k_cache, v_cache, meta, scale)
    store_kv(k, v, k_cache, v_cache, meta)
    num_blocks, block_size, n_kv, hd = k_cache.shape
    B, H = meta.num_seqs, q.shape[1]
    group = H // n_kv
    # The query heads that share a KV head are one tile's rows, so each K/V block is read once per KV head,
    # not once per query head. A tile of one row would make torch pick a decoding kernel that scans the
    # whole pool once the pool is long (32k tokens and more): a lone row is doubled.
    tile = max(group, 2)
    mask, stale = decode_block_mask(meta, block_size, num_blocks, rows, tile)
    v_cache.flatten(0, 1).index_fill_(0, stale, 0.0)
    queries = q.new_zeros(rows, n_kv, tile, hd)                                       # (rows, n_kv, tile, hd)
    queries[:B, :, :group] = q.view(B, n_kv, group, hd)
    keys = k_cache.view(1, -1, n_kv, hd).transpose(1, 2).expand(rows, -1, -1, -1)    # (rows, n_kv, pool, hd)
    values = v_cache.view(1, -1, n_kv, hd).transpose(1, 2).expand(rows, -1, -1, -1)  # (rows, n_kv, pool, hd)
    out = compiled_flex()(queries, keys, values, block_mask=mask, scale=scale)       # (rows, n_kv, tile, hd)
    return out[:B, :, :group].reshape(B, H, hd)
