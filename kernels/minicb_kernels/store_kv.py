"""store_kv: write each new token's K and V into its slot of the paged cache.

The cache is (num_blocks, block_size, n_kv, head_dim); slot s is row s % block_size of block
s // block_size, so the scheduler's block table decides where a token lands, and a slot of -1
(a padding token, or a token whose K/V is already cached) writes nothing.
"""
import torch
import triton
import triton.language as tl

from minicb_kernels.tiles import check_cache, padded_head_dim


@triton.jit
def store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_cache_block, stride_cache_slot, stride_cache_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr):
    # One program copies one (token, kv head) row of HEAD_DIM values for K and for V.
    token, head = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_mapping_ptr + token)
    if slot < 0:
        return
    dims = tl.arange(0, HEAD_PAD)
    in_head = dims < HEAD_DIM
    # int64 so that block * stride cannot overflow on a large cache
    dst = (slot // BLOCK_SIZE) * stride_cache_block + (slot % BLOCK_SIZE) * stride_cache_slot \
        + head * stride_cache_head + dims
    k = tl.load(k_ptr + token * stride_kt + head * stride_kh + dims, mask=in_head)
    v = tl.load(v_ptr + token * stride_vt + head * stride_vh + dims, mask=in_head)
    tl.store(k_cache_ptr + dst, k, mask=in_head)
    tl.store(v_cache_ptr + dst, v, mask=in_head)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k, v (T, n_kv, hd) -> caches (num_blocks, block_size, n_kv, hd) at slot_mapping (T,) int64; -1 skips."""
    check_cache(k_cache, v_cache)
    T, n_kv, head_dim = k.shape
    if T == 0:
        return
    assert k.stride(-1) == v.stride(-1) == 1, "K/V rows must be contiguous along head_dim"
    store_kv_kernel[(T, n_kv)](
        k, v, k_cache, v_cache, slot_mapping.to(torch.int64),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim, HEAD_PAD=padded_head_dim(head_dim))
