"""Lesson 05: attention over a paged KV cache in one Triton launch.

Task 1  paged_decode_attention   pytest tests/exercises -k lesson05_task1

On a CPU, Triton runs under its interpreter: TRITON_INTERPRET=1 must be set before Python starts
(the lesson's first cell does it for the notebook; `make test` sets it for the tests). Read
store_kv.py, prefill.py and tiles.py in kernels/minicb_kernels/ first: the tile loop, the block-table
indirection (load_context_tile) and the online softmax (online_softmax_update) are all there, for
the varlen kernel. The engine runs yours for every decode step with `attn_backend="triton"`.
"""
from __future__ import annotations

import torch


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
                           block_tables: torch.Tensor, max_seq_len: int, scale: float,
                           num_splits: int | None = None) -> torch.Tensor:
    """Decode attention for B sequences, one new query token each, in one kernel launch.

    q (B, H, hd); caches (num_blocks, block_size, n_kv, hd) already holding every context token,
    the new one included; seq_lens (B,) int32 context lengths; block_tables (B, M) int32. Returns
    out (B, H, hd) in q's dtype: for each sequence b and head h, softmax(scale * q[b, h] . K^T) V over
    positions 0 .. seq_lens[b] - 1, where position p lives at row p % block_size of block
    block_tables[b, p // block_size], and query head h reads KV head h // (H / n_kv) (GQA).

    Write a @triton.jit kernel with one program per (sequence, KV head), whose rows are the query
    heads of that KV head; walk the context in tiles, keep the online softmax's running max, sum and
    weighted values in fp32, upcast every load to fp32 (the interpreter mishandles bf16), and launch
    it over the grid (B, n_kv). num_splits may be ignored (one pass over the context).
    """
    raise NotImplementedError("Lesson 05, task 1: paged_decode_attention: a paged decode attention kernel. "
                              "Check it with: pytest tests/exercises -k lesson05_task1")
