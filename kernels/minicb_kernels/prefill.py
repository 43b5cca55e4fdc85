"""Varlen attention: one launch for the new tokens of B sequences of different lengths.

The queries of all sequences are packed into one (T, H, hd) tensor; sequence i owns rows
cu_seqlens_q[i] : cu_seqlens_q[i+1]. Its context is seq_lens[i] tokens in the paged cache, of
which the last q_len are the new ones (store_kv wrote them there first); the earlier ones are a
cached prefix left by chunked prefill or by a preempted request's earlier steps. New token j sits
at position prefix + j and sees positions 0 .. prefix + j (causal).

Grid: (query tiles, sequences, query heads). A program takes BLOCK_M query rows of one sequence
and one head and walks the context in BLOCK_N tiles with the online softmax (see tiles.py). With
GQA, head h reads KV head h // (H / n_kv). A decode row is just a sequence with q_len 1, so the
same launch serves a mixed batch of prefills and decodes.
"""
import torch
import triton
import triton.language as tl

from minicb_kernels.tiles import LOG2_E, check_attention_inputs, dot_dtype, load_context_tile, online_softmax_update, \
    padded_head_dim, tile_sizes


@triton.jit
def varlen_attention_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
                            block_tables_ptr, scale_log2,
                            stride_qt, stride_qh, stride_ot, stride_oh,
                            stride_cache_block, stride_cache_slot, stride_cache_head, stride_table,
                            QUERIES_PER_KV: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                            HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr):
    q_tile, seq, head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    if q_tile * BLOCK_M >= q_len:          # the grid is sized for the longest sequence
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix = seq_len - q_len

    rows = q_tile * BLOCK_M + tl.arange(0, BLOCK_M)                  # (M,) index among the new tokens
    q_pos = prefix + rows                                            # (M,) their positions in the sequence
    dims = tl.arange(0, HEAD_PAD)
    q_mask = (rows < q_len)[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + (q_start + rows)[:, None] * stride_qt + head * stride_qh + dims[None, :],
                mask=q_mask, other=0.0).to(tl.float32)               # (M, HEAD_PAD)

    kv_head = head // QUERIES_PER_KV
    table = block_tables_ptr + seq * stride_table
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_PAD), tl.float32)
    # Causality bounds the walk: no row of this tile sees past its last query's position.
    context_end = tl.minimum(seq_len, prefix + (q_tile + 1) * BLOCK_M)
    for start in range(0, context_end, BLOCK_N):
        positions = start + tl.arange(0, BLOCK_N)                   # (N,)
        k = load_context_tile(k_cache_ptr, table, positions, context_end, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)  # (N, HEAD_PAD)
        v = load_context_tile(v_cache_ptr, table, positions, context_end, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)  # (N, HEAD_PAD)
        scores = tl.dot(q.to(DOT_DTYPE), tl.trans(k).to(DOT_DTYPE), input_precision="ieee") * scale_log2  # (M, N)
        visible = (positions[None, :] <= q_pos[:, None]) & (positions < context_end)[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        row_max, row_sum, acc = online_softmax_update(scores, v, row_max, row_sum, acc, DOT_DTYPE)

    out = acc / row_sum[:, None]
    tl.store(out_ptr + (q_start + rows)[:, None] * stride_ot + head * stride_oh + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_mask)


def varlen_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     seq_lens: torch.Tensor, block_tables: torch.Tensor, max_query_len: int,
                     scale: float) -> torch.Tensor:
    """q (T, H, hd) packed by cu_seqlens_q (B+1,); caches (num_blocks, block_size, n_kv, hd) already
    holding every token's K/V; seq_lens (B,); block_tables (B, M) -> out (T, H, hd)."""
    num_heads, num_kv_heads, head_dim = check_attention_inputs(q, k_cache, v_cache)
    T = q.shape[0]
    out = torch.empty_like(q)
    if T == 0:
        return out
    block_m, block_n = tile_sizes(head_dim, q.dtype)
    grid = (triton.cdiv(max_query_len, block_m), seq_lens.shape[0], num_heads)
    varlen_attention_kernel[grid](
        q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, block_tables, scale * LOG2_E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        QUERIES_PER_KV=num_heads // num_kv_heads, BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
        HEAD_PAD=padded_head_dim(head_dim), BLOCK_M=block_m, BLOCK_N=block_n, DOT_DTYPE=dot_dtype(q.dtype))
    return out
