"""Paged decode attention: one new query token per sequence, over its whole cached context.

Grid: (sequences, KV heads, splits). With GQA, the H / n_kv query heads that share a KV head are
one program's rows, so each K/V tile is read from memory once for all of them; decode is bound by
reading the cache, so that read is what matters.

Split-KV: at batch 1 with 8 KV heads the grid has 8 programs, far too few to fill a GPU's ~130
multiprocessors, and each walks the whole context alone. Splitting each sequence's context into
num_splits runs gives more programs; each writes its partial output, normalised by its own sum, and
the log of that sum (its log-sum-exp). A small reduce kernel then weighs the partials by
exp(lse_s - max lse) and adds them, which is the same softmax over the whole context.
"""
import functools

import torch
import triton
import triton.language as tl

from minicb_kernels.tiles import LOG2_E, check_attention_inputs, dot_dtype, interpreting, load_context_tile, \
    online_softmax_update, padded_head_dim, pow2, tile_sizes


@triton.jit
def paged_decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, partial_out_ptr, partial_lse_ptr,
                        seq_lens_ptr, block_tables_ptr, scale_log2, num_heads, num_splits,
                        stride_qt, stride_qh, stride_ot, stride_oh,
                        stride_cache_block, stride_cache_slot, stride_cache_head, stride_table,
                        QUERIES_PER_KV: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                        HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                        SPLIT_KV: tl.constexpr, DOT_DTYPE: tl.constexpr):
    seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    # Each split takes a run of whole tiles; a short context leaves its last splits empty.
    tiles_per_split = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), num_splits)
    start = split * tiles_per_split * BLOCK_N
    end = tl.minimum(seq_len, start + tiles_per_split * BLOCK_N)

    group = tl.arange(0, GROUP_PAD)                                  # rows: the query heads of this KV head
    heads = kv_head * QUERIES_PER_KV + group
    dims = tl.arange(0, HEAD_PAD)
    row_mask = (group < QUERIES_PER_KV)[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq * stride_qt + heads[:, None] * stride_qh + dims[None, :],
                mask=row_mask, other=0.0).to(tl.float32)              # (GROUP_PAD, HEAD_PAD)

    table = block_tables_ptr + seq * stride_table
    row_max = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
    row_sum = tl.zeros((GROUP_PAD,), tl.float32)
    acc = tl.zeros((GROUP_PAD, HEAD_PAD), tl.float32)
    for tile_start in range(start, end, BLOCK_N):
        positions = tile_start + tl.arange(0, BLOCK_N)              # (N,)
        k = load_context_tile(k_cache_ptr, table, positions, end, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)  # (N, HEAD_PAD)
        v = load_context_tile(v_cache_ptr, table, positions, end, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)  # (N, HEAD_PAD)
        scores = tl.dot(q.to(DOT_DTYPE), tl.trans(k).to(DOT_DTYPE), input_precision="ieee") * scale_log2
        scores = tl.where((positions < end)[None, :], scores, float("-inf"))   # (GROUP_PAD, N)
        row_max, row_sum, acc = online_softmax_update(scores, v, row_max, row_sum, acc, DOT_DTYPE)

    if not SPLIT_KV:
        tl.store(out_ptr + seq * stride_ot + heads[:, None] * stride_oh + dims[None, :],
                 (acc / row_sum[:, None]).to(out_ptr.dtype.element_ty), mask=row_mask)
    else:
        # An empty split has row_sum 0: its output is 0 and its lse -inf, so the reduce gives it no weight.
        has_keys = row_sum > 0
        partial = acc / tl.where(has_keys, row_sum, 1.0)[:, None]
        lse = tl.where(has_keys, row_max + tl.log2(tl.where(has_keys, row_sum, 1.0)), float("-inf"))
        row = (seq * num_splits + split) * num_heads + heads        # (GROUP_PAD,) rows of the (B, splits, H) partials
        tl.store(partial_out_ptr + row[:, None] * HEAD_PAD + dims[None, :], partial, mask=row_mask)
        tl.store(partial_lse_ptr + row, lse, mask=group < QUERIES_PER_KV)


@triton.jit
def reduce_splits_kernel(partial_out_ptr, partial_lse_ptr, out_ptr, stride_ot, stride_oh, num_heads, num_splits,
                         SPLITS_PAD: tl.constexpr,
                         HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr):
    seq, head = tl.program_id(0), tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_PAD)
    rows = (seq * num_splits + splits) * num_heads + head            # (SPLITS_PAD,) partial rows of this head
    lse = tl.load(partial_lse_ptr + rows, mask=splits < num_splits, other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, 0))                          # split 0 always has keys: max is finite
    weights = weights / tl.sum(weights, 0)
    partial = tl.load(partial_out_ptr + rows[:, None] * HEAD_PAD + dims[None, :],
                      mask=(splits < num_splits)[:, None], other=0.0)  # (SPLITS_PAD, HEAD_PAD)
    out = tl.sum(weights[:, None] * partial, 0)
    tl.store(out_ptr + seq * stride_ot + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty),
             mask=dims < HEAD_DIM)


@functools.lru_cache
def multiprocessor_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, block_n: int, device: torch.device) -> int:
    """Enough programs to give every GPU multiprocessor about two, never a split under 4 tiles.
    The interpreter runs programs one after another, so splitting only costs it time."""
    if interpreting() or device.type != "cuda":
        return 1
    by_occupancy = triton.cdiv(2 * multiprocessor_count(device), num_seqs * num_kv_heads)
    by_length = max(1, max_seq_len // (4 * block_n))
    return max(1, min(by_occupancy, by_length, 32))


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
                           block_tables: torch.Tensor, max_seq_len: int, scale: float,
                           num_splits: int | None = None) -> torch.Tensor:
    """q (B, H, hd), one row per sequence; caches (num_blocks, block_size, n_kv, hd) already holding
    the new token's K/V; seq_lens (B,); block_tables (B, M) -> out (B, H, hd).
    num_splits=None picks a split-KV factor for the GPU at hand."""
    num_heads, num_kv_heads, head_dim = check_attention_inputs(q, k_cache, v_cache)
    B = q.shape[0]
    out = torch.empty_like(q)
    if B == 0:
        return out
    _, block_n = tile_sizes(head_dim, q.dtype)
    splits = num_splits or choose_num_splits(B, num_kv_heads, max_seq_len, block_n, q.device)
    head_pad, group = padded_head_dim(head_dim), num_heads // num_kv_heads
    partial_out = q.new_empty((B, splits, num_heads, head_pad), dtype=torch.float32) if splits > 1 else out
    partial_lse = q.new_empty((B, splits, num_heads), dtype=torch.float32) if splits > 1 else out
    paged_decode_kernel[(B, num_kv_heads, splits)](
        q, k_cache, v_cache, out, partial_out, partial_lse, seq_lens, block_tables, scale * LOG2_E, num_heads, splits,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        QUERIES_PER_KV=group, GROUP_PAD=max(16, pow2(group)), BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
        HEAD_PAD=head_pad, BLOCK_N=block_n, SPLIT_KV=splits > 1, DOT_DTYPE=dot_dtype(q.dtype))
    if splits > 1:
        reduce_splits_kernel[(B, num_heads)](
            partial_out, partial_lse, out, out.stride(0), out.stride(1), num_heads, splits,
            SPLITS_PAD=pow2(splits), HEAD_DIM=head_dim, HEAD_PAD=head_pad)
    return out
