"""Negative controls for lesson 05's grader: plausible wrong kernels must each fail the rule they break,
and pass the rules they keep. Three are minicb's kernel, wrapped to make one learner's mistake; the online
softmax's mistakes live inside a kernel, which cannot be wrapped, so `with_a_softmax_mistake` is the
skeleton's kernel filled in with the mistake switched on (a wrong kernel, not an answer key)."""
from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl
from _pytest.outcomes import Failed
from minicb_kernels import paged_decode_attention
from minicb_kernels.tiles import check_attention_inputs, load_context_tile, padded_head_dim, pow2, tile_sizes

from test_lesson05_triton import (
    ATTENTION_RULE, GQA_RULE, LARGE_SCORES_RULE, NO_WEIGHT_RULE, RESCALE_RULE, UNREAD_RULE, check_bard_decodes,
    check_context_end, check_gqa, check_large_scores, check_one_tile, check_paged, check_rescale)


@triton.jit
def softmax_mistake_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, seq_lens_ptr, block_tables_ptr, scale,
                           stride_qb, stride_qh, stride_ob, stride_oh,
                           stride_cache_block, stride_cache_slot, stride_cache_head, stride_table,
                           QUERIES_PER_KV: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                           HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                           FORGETS_RESCALE: tl.constexpr, SKIPS_MAX: tl.constexpr, WEIGHS_PAST_THE_END: tl.constexpr):
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    group = tl.arange(0, GROUP_PAD)
    heads = kv_head * QUERIES_PER_KV + group
    dims = tl.arange(0, HEAD_PAD)
    row_mask = (group < QUERIES_PER_KV)[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
                mask=row_mask, other=0.0).to(tl.float32)
    table = block_tables_ptr + seq * stride_table
    row_max = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
    row_sum = tl.zeros((GROUP_PAD,), tl.float32)
    acc = tl.zeros((GROUP_PAD, HEAD_PAD), tl.float32)
    for tile_start in range(0, seq_len, BLOCK_N):
        positions = tile_start + tl.arange(0, BLOCK_N)
        k = load_context_tile(k_cache_ptr, table, positions, seq_len, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)
        v = load_context_tile(v_cache_ptr, table, positions, seq_len, kv_head, stride_cache_block,
                              stride_cache_slot, stride_cache_head, BLOCK_SIZE, HEAD_DIM, HEAD_PAD)
        scores = tl.sum(q[:, None, :] * k[None, :, :], 2) * scale
        if not WEIGHS_PAST_THE_END:   # the mistake: the loads are masked (0.0), the scores are not (exp(0 - max))
            scores = tl.where((positions < seq_len)[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        if SKIPS_MAX:       # exp of the raw scores: exact in real numbers, inf in fp32 past 88
            new_max = tl.zeros_like(row_max)
        rescale = tl.exp(row_max - new_max)
        if FORGETS_RESCALE:  # the old sums stay at the old max's scale
            rescale = tl.full((GROUP_PAD,), 1.0, tl.float32)
        weights = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * rescale + tl.sum(weights, 1)
        acc = acc * rescale[:, None] + tl.sum(weights[:, :, None] * v[None, :, :], 1)
        row_max = new_max
    tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh + dims[None, :],
             (acc / row_sum[:, None]).to(out_ptr.dtype.element_ty), mask=row_mask)



def with_a_softmax_mistake(forgets_rescale: bool = False, skips_max: bool = False, weighs_past_the_end: bool = False):
    def launch(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale, num_splits=None):
        num_heads, num_kv_heads, head_dim = check_attention_inputs(q, k_cache, v_cache)
        out = torch.empty_like(q)
        group = num_heads // num_kv_heads
        softmax_mistake_kernel[(q.shape[0], num_kv_heads)](
            q, k_cache, v_cache, out, seq_lens, block_tables, scale,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
            QUERIES_PER_KV=group, GROUP_PAD=max(16, pow2(group)), BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
            HEAD_PAD=padded_head_dim(head_dim), BLOCK_N=tile_sizes(head_dim, q.dtype)[1],
            FORGETS_RESCALE=forgets_rescale, SKIPS_MAX=skips_max, WEIGHS_PAST_THE_END=weighs_past_the_end)
        return out
    return launch


def masks_at_the_block_end(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale, num_splits=None):
    """The context is taken to end where its last block ends: the rows past seq_len in it count."""
    block_size = k_cache.shape[1]
    return paged_decode_attention(q, k_cache, v_cache, (seq_lens + block_size - 1) // block_size * block_size,
                                  block_tables, max_seq_len, scale)


def interleaves_gqa(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale, num_splits=None):
    """Query head h reads KV head h % n_kv (repeat where GQA means repeat_interleave)."""
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    order = torch.arange(num_heads, device=q.device).view(-1, num_kv_heads).T.flatten()   # heads by h % n_kv
    out = paged_decode_attention(q[:, order].contiguous(), k_cache, v_cache, seq_lens, block_tables, max_seq_len,
                                 scale)
    return out[:, order.argsort()]


def forgets_the_kv_head_offset(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale, num_splits=None):
    """The cache address leaves out kv_head * stride_cache_head: every query head reads KV head 0."""
    return paged_decode_attention(q, k_cache[:, :, :1].expand_as(k_cache), v_cache[:, :, :1].expand_as(v_cache),
                                  seq_lens, block_tables, max_seq_len, scale)


def fails(check, kernel, rule: str) -> None:
    with pytest.raises(Failed, match="^paged_decode_attention: " + re.escape(rule)):
        check(kernel)


def test_a_kernel_without_the_rescale_fails_the_online_softmax_rule_only():
    kernel = with_a_softmax_mistake(forgets_rescale=True)
    fails(check_rescale, kernel, RESCALE_RULE)
    check_one_tile(kernel)
    check_context_end(kernel)


def test_bard_stops_a_kernel_without_the_rescale_at_the_seam_once_a_context_passes_a_tile():
    fails(check_bard_decodes, with_a_softmax_mistake(forgets_rescale=True),
          f"{ATTENTION_RULE}, on the engine's decode step: Bard's context 65 (2 tiles)")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the interpreter overflowing exp, which is the point
def test_a_kernel_without_the_max_fails_on_large_scores_only():
    kernel = with_a_softmax_mistake(skips_max=True)
    fails(check_large_scores, kernel, LARGE_SCORES_RULE)
    check_one_tile(kernel)
    check_rescale(kernel)
    check_paged(kernel)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the interpreter reducing the NaN it read
def test_a_kernel_reading_to_the_block_end_fails_the_context_end_rule_for_reading():
    fails(check_context_end, masks_at_the_block_end, UNREAD_RULE)
    check_one_tile(masks_at_the_block_end)


def test_a_kernel_weighing_the_keys_past_the_end_fails_the_context_end_rule_for_weight():
    kernel = with_a_softmax_mistake(weighs_past_the_end=True)
    fails(check_context_end, kernel, NO_WEIGHT_RULE)
    check_one_tile(kernel)
    check_rescale(kernel)


@pytest.mark.parametrize("kernel", [interleaves_gqa, forgets_the_kv_head_offset], ids=lambda k: k.__name__)
def test_a_kernel_ignoring_the_gqa_head_mapping_fails_the_gqa_rule(kernel):
    fails(check_gqa, kernel, GQA_RULE)
    check_one_tile(kernel)
