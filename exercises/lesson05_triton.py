"""Lesson 05: attention over a paged KV cache in one Triton launch.

Task 1  paged_decode_attention   pytest tests/exercises -k lesson05_task1

On a CPU, Triton runs under its interpreter: TRITON_INTERPRET=1 must be set before Python starts
(the lesson's first cell does it for the notebook; `make test` sets it for the tests). The engine runs
your kernel for every decode step with `attn_backend="triton"`.

What is written for you, and what is yours. The host function, paged_decode_attention, is written: it
checks the inputs, allocates the output and launches paged_decode_kernel over the grid (B, n_kv), one
program per (sequence, KV head). In the kernel, the program's rows (the query heads that read its KV
head), their query vectors, the running softmax state and the loop over the context in tiles of BLOCK_N
positions are written too. The kernel's TODOs are yours: each says what its values must be, not how to
compute them. Then delete the NotImplementedError line at the top of paged_decode_attention, and check.
What the whole must compute is paged_decode_attention's contract, in its docstring; the tests check
each of its rules on a decode step of its own (a context of one tile, one that ends inside a tile,
contexts of several tiles, scores too large for a plain exp, shuffled blocks, GQA, a batch, a head_dim
that is not a power of two), then random steps, then Bard decoding past a tile's end.

Helpers. kernels/minicb_kernels/tiles.py holds the reference's own versions of TODO 1 and TODO 3.
load_context_tile (TODO 1) you may call: the block-table addressing is lesson 04's idea, and writing
it again is three lines of pointer arithmetic (read it either way: a load past the context's end must
be masked). online_softmax_update (TODO 3) you may not: keeping the running state right is this
lesson's idea, which section 3 of the notebook works through in numpy. Read decode.py, the reference
kernel, after yours passes (it adds split-KV for long contexts).

Two rules of the road. Upcast every load to fp32 with .to(tl.float32): the interpreter mishandles
bf16 arithmetic. And on a GPU tl.dot needs every dimension of both operands >= 16 (use
input_precision="ieee" for fp32, or it rounds to tf32 and misses the tolerance): the launch pads the
rows to GROUP_PAD >= 16 (Bard has 4 query heads per KV head) and head_dim to HEAD_PAD >= 16 for that
reason. A broadcast multiply and a sum (tl.sum(a[:, None, :] * b[None, :, :], 2)) works at any size
and is just as exact; under the interpreter either is fine.
"""
# The skeleton's names are read by the code the TODOs ask for; until then a linter sees them unused.
# ruff: noqa: F841
from __future__ import annotations

import torch
import triton
import triton.language as tl

from minicb_kernels.tiles import check_attention_inputs, padded_head_dim, pow2, tile_sizes


@triton.jit
def paged_decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, seq_lens_ptr, block_tables_ptr, scale,
                        stride_qb, stride_qh, stride_ob, stride_oh,
                        stride_cache_block, stride_cache_slot, stride_cache_head, stride_table,
                        QUERIES_PER_KV: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                        HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, BLOCK_N: tl.constexpr):
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)                            # context length, the new token included

    # Rows: the QUERIES_PER_KV query heads that read this KV head, padded to GROUP_PAD (padding rows
    # are zeros, never stored). Columns: head_dim, padded to HEAD_PAD. row_mask is True on the real ones.
    group = tl.arange(0, GROUP_PAD)
    heads = kv_head * QUERIES_PER_KV + group                         # (GROUP_PAD,) query head of each row
    dims = tl.arange(0, HEAD_PAD)                                    # (HEAD_PAD,)
    row_mask = (group < QUERIES_PER_KV)[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
                mask=row_mask, other=0.0).to(tl.float32)              # (GROUP_PAD, HEAD_PAD)
    table = block_tables_ptr + seq * stride_table                    # this sequence's row of block ids

    # The online softmax's running state, one entry per row, all fp32 (section 3 of the notebook).
    row_max = tl.full((GROUP_PAD,), float("-inf"), tl.float32)       # largest score so far
    row_sum = tl.zeros((GROUP_PAD,), tl.float32)                     # sum of exp(score - row_max)
    acc = tl.zeros((GROUP_PAD, HEAD_PAD), tl.float32)                # sum of exp(score - row_max) * v
    for tile_start in range(0, seq_len, BLOCK_N):
        positions = tile_start + tl.arange(0, BLOCK_N)              # (BLOCK_N,) context positions of this tile

        # TODO 1: k and v, each (BLOCK_N, HEAD_PAD) fp32: the keys and values of kv_head at this tile's
        #   positions, read through the sequence's block table (lesson 04's layout; the cache's strides are
        #   stride_cache_block, _slot and _head). Positions >= seq_len and columns >= HEAD_DIM must not be read
        #   (past the context the table's entries need not be block ids and the cache holds stale values; past
        #   HEAD_DIM lies the next head): 0.0 there. (load_context_tile may do it: see the module's docstring.)

        # TODO 2: scores (GROUP_PAD, BLOCK_N): each row's query against each key of the tile, scaled by `scale`;
        #   a key at a position >= seq_len (the last tile runs past the context's end) must get no weight.

        # TODO 3: fold this tile into row_max, row_sum and acc, so that after it they are what their comments
        #   above say, over every key seen so far, for any scores (they may be far too large for a plain exp).

    # TODO 4: store out[seq, heads, dims] (strides stride_ob, stride_oh) for the real rows and columns only
    #   (row_mask): each row's softmax-weighted sum of the values, in the output's dtype (out_ptr.dtype.element_ty).


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
                           block_tables: torch.Tensor, max_seq_len: int, scale: float,
                           num_splits: int | None = None) -> torch.Tensor:
    """Decode attention for B sequences, one new query token each, in one kernel launch: what every
    decode step of the engine computes in every layer, with the triton backend.

    What it may read: q (B, H, hd), the new tokens' queries; the caches (num_blocks, block_size, n_kv, hd),
    already holding every context token, the new one included; seq_lens (B,) int32, the context lengths;
    block_tables (B, M) int32, each sequence's blocks in order (position p lives at row p % block_size of
    block block_tables[b, p // block_size]; entries past a context's blocks may be -1); scale.

    The contract: out (B, H, hd) in q's dtype, where out[b, h] = softmax(scale * q[b, h] . K^T) V over the
    positions 0 .. seq_lens[b] - 1 of sequence b, query head h reading KV head h // (H / n_kv) (GQA), to
    the rounding of q's dtype (fp32: 1e-5 relative), for contexts of any length and scores of any size.
    Nothing outside a context counts or is read: the cache there may hold anything, NaN included.

    Written for you: the launch of paged_decode_kernel over the grid (B, n_kv), whose program for
    (b, g) computes the rows of query heads g * H / n_kv ... (g + 1) * H / n_kv - 1 of sequence b.
    num_splits is ignored (one pass over the context; the reference splits long contexts).
    """
    raise NotImplementedError("Lesson 05, task 1: paged_decode_attention: fill in the TODOs of the kernel, then "
                              "delete this line. Check it with: pytest tests/exercises -k lesson05_task1")
    num_heads, num_kv_heads, head_dim = check_attention_inputs(q, k_cache, v_cache)
    out = torch.empty_like(q)
    if q.shape[0] == 0:
        return out
    group = num_heads // num_kv_heads
    paged_decode_kernel[(q.shape[0], num_kv_heads)](
        q, k_cache, v_cache, out, seq_lens, block_tables, scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        QUERIES_PER_KV=group, GROUP_PAD=max(16, pow2(group)), BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
        HEAD_PAD=padded_head_dim(head_dim), BLOCK_N=tile_sizes(head_dim, q.dtype)[1])
    return out
