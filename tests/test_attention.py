"""Every attention backend (torch, torch-loop, triton, flex) against dense causal attention written out by hand."""
from __future__ import annotations

import math

import pytest
import torch

from minicb.attention import BACKENDS
from minicb.attention.flex_backend import MIN_SEQS, flex_decode_attention
from minicb.attention.torch_backend import paged_attention
from minicb.runner.batch import SequenceChunk
from minicb.runner.batch_builder import build_flat_batch


def dense_causal_attention(q, k, v, scale):
    """q (S_new, H, hd) are the last S_new positions of a context with keys k, v (S, n_kv, hd)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", q, k) * scale                    # (H, S_new, S)
    first = k.shape[0] - q.shape[0]
    causal = torch.arange(k.shape[0])[None, :] > (first + torch.arange(q.shape[0]))[:, None]
    probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
    return torch.einsum("hts,shd->thd", probs, v)


@pytest.mark.parametrize("backend", [name for name in BACKENDS if name != "flex"])   # flex: prefills go to torch
@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (8, 1)])
def test_paged_attention_matches_dense(backend, block_size, heads, kv_heads):
    g = torch.Generator().manual_seed(block_size * 10 + heads + kv_heads)
    hd, num_blocks = 8, 64
    # (computed prefix, new tokens): a prefill, a chunked-prefill continuation, decodes, block edges
    shapes = [(0, 9), (5, 3), (16, 1), (block_size - 1, 1), (0, 1), (2 * block_size, block_size)]
    k_cache = torch.zeros(num_blocks, block_size, kv_heads, hd)
    v_cache = torch.zeros_like(k_cache)
    free = torch.randperm(num_blocks, generator=g).tolist()  # shuffled, non-contiguous blocks
    tables, full_k, full_v, qs, ks, vs = [], [], [], [], [], []
    for computed, new in shapes:
        total = computed + new
        table = [free.pop() for _ in range(math.ceil(total / block_size))]
        tables.append(table)
        k_all = torch.randn(total, kv_heads, hd, generator=g)
        v_all = torch.randn(total, kv_heads, hd, generator=g)
        for pos in range(computed):  # the prefix is already in the cache from earlier steps
            k_cache[table[pos // block_size], pos % block_size] = k_all[pos]
            v_cache[table[pos // block_size], pos % block_size] = v_all[pos]
        full_k.append(k_all)
        full_v.append(v_all)
        qs.append(torch.randn(new, heads, hd, generator=g))
        ks.append(k_all[computed:])
        vs.append(v_all[computed:])
    chunks = [SequenceChunk([0] * new, computed, table) for (computed, new), table in zip(shapes, tables)]
    meta = build_flat_batch(chunks, block_size).attn
    out = BACKENDS[backend](torch.cat(qs), torch.cat(ks), torch.cat(vs), k_cache, v_cache, meta, scale=hd ** -0.5)
    want = torch.cat([dense_causal_attention(q, k, v, hd ** -0.5) for q, k, v in zip(qs, full_k, full_v)])
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_batch_rejects_a_block_table_too_short_or_a_chunk_without_tokens():
    with pytest.raises(ValueError, match="cannot hold"):
        build_flat_batch([SequenceChunk([1, 2, 3], 17, [0])], block_size=16)
    with pytest.raises(ValueError, match="needs 1..seq_len new tokens"):
        build_flat_batch([SequenceChunk([], 4, [0])], block_size=16)
    with pytest.raises(ValueError, match="needs 1..seq_len new tokens"):
        build_flat_batch([SequenceChunk([1], -1, [0])], block_size=16)
    with pytest.raises(ValueError, match="at least one"):
        build_flat_batch([], block_size=16)


def test_slot_minus_one_is_not_written():
    k_cache = torch.zeros(2, 2, 1, 4)
    v_cache = torch.zeros_like(k_cache)
    meta = build_flat_batch([SequenceChunk([0, 0], 0, [1])], block_size=2).attn
    meta.slot_mapping[0] = -1  # a padding token
    k = torch.ones(2, 1, 4)
    paged_attention(torch.ones(2, 1, 4), k, k, k_cache, v_cache, meta, scale=0.5)
    assert k_cache[1, 0].abs().sum() == 0 and k_cache[1, 1].abs().sum() == 4 and k_cache[0].abs().sum() == 0


@pytest.mark.parametrize("block_size,heads,kv_heads", [(16, 9, 3), (4, 4, 4)])   # SmolLM2's grouping; no grouping
def test_flex_decode_reads_the_paged_cache_in_place(block_size, heads, kv_heads):
    """Decodes of MIN_SEQS+ sequences on shuffled blocks, contexts ending mid-block and on a block's edge, rows
    padded past the batch, and every slot no sequence owns holding a stale NaN (another request's)."""
    g = torch.Generator().manual_seed(block_size + heads)
    hd, num_blocks, num_seqs = 8, 256, MIN_SEQS + 3
    k_cache = torch.full((num_blocks, block_size, kv_heads, hd), float("nan"))
    v_cache = torch.full_like(k_cache, float("nan"))
    free = torch.randperm(num_blocks, generator=g).tolist()
    contexts = [block_size, 2 * block_size, 1] + torch.randint(2, 5 * block_size, (num_seqs - 3,), generator=g).tolist()
    chunks, qs, ks, vs, wants = [], [], [], [], []
    for total in contexts:
        table = [free.pop() for _ in range(math.ceil(total / block_size))]
        k_all, v_all = torch.randn(2, total, kv_heads, hd, generator=g)
        for pos in range(total - 1):   # the context before this step's token is in the cache
            k_cache[table[pos // block_size], pos % block_size] = k_all[pos]
            v_cache[table[pos // block_size], pos % block_size] = v_all[pos]
        q = torch.randn(1, heads, hd, generator=g)
        chunks.append(SequenceChunk([0], total - 1, table))
        qs.append(q), ks.append(k_all[-1:]), vs.append(v_all[-1:])
        wants.append(dense_causal_attention(q, k_all, v_all, hd ** -0.5))
    meta = build_flat_batch(chunks, block_size).attn
    out = flex_decode_attention(torch.cat(qs), torch.cat(ks), torch.cat(vs), k_cache, v_cache, meta, hd ** -0.5,
                                rows=num_seqs + 5)
    assert any(key[0] == "flex" for key in meta.derived), "the flex path did not run"
    torch.testing.assert_close(out, torch.cat(wants), atol=1e-5, rtol=1e-5)
