"""What the attention kernels share: reading a tile of context through a block table, the online
softmax update, and the tile sizes for a GPU or for the CPU interpreter.

Online softmax in one paragraph. Attention for one query row is sum_j softmax(s)_j v_j over the
context. A kernel sees the context one tile of keys at a time, so it keeps three running values
per row: row_max m, the largest score so far; row_sum, the sum of exp(s_j - m); and acc, the sum
of exp(s_j - m) v_j. When a tile brings a larger maximum m', the old sums are rescaled by
exp(m - m'), which is exact, so after the last tile acc / row_sum is the softmax-weighted sum, with no (rows, context)
score matrix ever held in memory. Scores are kept in base 2 (scaled by log2(e)) because exp2 is
the cheaper instruction.
"""
import os

import torch
import triton
import triton.language as tl

LOG2_E = 1.4426950408889634


def pow2(n: int) -> int:
    """tl.arange needs a power of two."""
    return triton.next_power_of_2(n)


def padded_head_dim(head_dim: int) -> int:
    """head_dim rounded up to a power of two of at least 16 (tl.dot's smallest side); 80 or 96
    become 128, and the kernels mask the extra columns."""
    return max(16, pow2(head_dim))


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def dot_dtype(dtype: torch.dtype):
    """The dtype tl.dot multiplies in. Every load is upcast to fp32 at once (the interpreter mishandles
    bf16 arithmetic); on a GPU a 16-bit cache is cast back down for the dot, which is lossless for
    the inputs and lets the tensor cores run at 16-bit speed. Accumulation is always fp32."""
    if interpreting() or dtype == torch.float32:
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[dtype]


def tile_sizes(head_dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_M query rows, BLOCK_N context tokens) per tile: big enough to feed a GPU's tensor cores,
    small enough that the pipelined K/V tiles fit in shared memory (about 16 KB a tile: 64 rows at
    head_dim 128 in 16-bit, 32 in fp32). The interpreter likes big tiles too: it pays per operation,
    not per element (64x64 tiles run a prefill 7x faster there than 16x32)."""
    rows = max(16, min(64, 16384 // (padded_head_dim(head_dim) * torch.finfo(dtype).bits // 8)))
    return rows, rows


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    if k_cache.shape != v_cache.shape or k_cache.dim() != 4:
        raise ValueError(f"caches must both be (num_blocks, block_size, n_kv, head_dim), got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise ValueError("K and V caches need the same strides, contiguous along head_dim")


def check_attention_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int]:
    """(num_heads, num_kv_heads, head_dim) of queries q (rows, H, hd) over these caches."""
    check_cache(k_cache, v_cache)
    _, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} KV heads evenly")
    if q.stride(-1) != 1:
        raise ValueError("query rows must be contiguous along head_dim")
    return num_heads, num_kv_heads, head_dim


@triton.jit
def load_context_tile(cache_ptr, block_table_ptr, positions, context_len, kv_head,
                      stride_cache_block, stride_cache_slot, stride_cache_head,
                      BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr):
    """Rows `positions` (N,) of one sequence's K or V for one KV head, as (N, HEAD_PAD) fp32.

    The block-table indirection: position p lives in the sequence's (p // BLOCK_SIZE)-th block,
    whose id the table gives, at row p % BLOCK_SIZE. Consecutive positions may sit in blocks far
    apart, so each row's address is computed on its own. Rows at or past context_len read 0."""
    valid = positions < context_len
    block_ids = tl.load(block_table_ptr + positions // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
    dims = tl.arange(0, HEAD_PAD)
    rows = block_ids * stride_cache_block + (positions % BLOCK_SIZE) * stride_cache_slot + kv_head * stride_cache_head
    mask = valid[:, None] & (dims[None, :] < HEAD_DIM)
    return tl.load(cache_ptr + rows[:, None] + dims[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def online_softmax_update(scores, values, row_max, row_sum, acc, DOT_DTYPE: tl.constexpr):
    """Fold one tile into the running (row_max, row_sum, acc). scores (M, N) are base-2 and -inf where
    a key is hidden; every row has seen a visible key by the end of its first tile, so row_max is finite."""
    new_max = tl.maximum(row_max, tl.max(scores, 1))
    rescale = tl.exp2(row_max - new_max)                          # (M,) shrinks the old sums
    p = tl.exp2(scores - new_max[:, None])                        # (M, N) this tile's weights
    row_sum = row_sum * rescale + tl.sum(p, 1)
    acc = acc * rescale[:, None] + tl.dot(p.to(DOT_DTYPE), values.to(DOT_DTYPE), input_precision="ieee")
    return new_max, row_sum, acc
