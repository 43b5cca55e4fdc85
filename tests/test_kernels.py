"""The Triton kernels against attention written out in float64 PyTorch, over shapes hypothesis draws:
lengths from 1 to a few hundred with every block and tile boundary, shuffled block tables, GQA
ratios 1/2/4/8, head_dim 32/64/128, block_size 16/32, fp32/fp16/bf16. On a CPU they run under
TRITON_INTERPRET=1 (conftest sets it); on a GPU the same tests run at larger shapes."""
from __future__ import annotations

import importlib.util
import math

import minicb_kernels
import pytest
import torch
from conftest import NEAR_TIE_GAP, count_near_ties
from hypothesis import given, settings
from hypothesis import strategies as st
from minicb_kernels import paged_decode_attention, store_kv, varlen_attention

from minicb.attention import BACKENDS, select_backend
from minicb.attention.triton_backend import unavailable_reason
from minicb.llm import LLM
from minicb.sampling import SamplingParams

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
MAX_CONTEXT = 4096 if ON_GPU else 300      # the interpreter runs each program in Python: keep it small
MAX_NEW_TOKENS = 1024 if ON_GPU else 130
MAX_SEQS = 16 if ON_GPU else 3
EXAMPLES = 40 if ON_GPU else 60      # on a GPU each new shape costs a compile
BOUNDARIES = [1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 256]  # blocks are 16/32, tiles 64

# fp32 to 1e-5 relative. fp16/bf16 to 2 units in the last place of the output dtype, relative, with a
# floor of 2 ulps at 1.0 (the scale of V) so that outputs which cancel to near 0 are judged fairly.
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-6),
             torch.float16: dict(rtol=2 * torch.finfo(torch.float16).eps, atol=2 * torch.finfo(torch.float16).eps),
             torch.bfloat16: dict(rtol=2 * torch.finfo(torch.bfloat16).eps, atol=2 * torch.finfo(torch.bfloat16).eps)}


class PagedBatch:
    """A random batch over a paged cache whose blocks are handed out in shuffled order."""

    def __init__(self, seq_lens, query_lens, num_heads, num_kv_heads, head_dim, block_size, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        self.seq_lens, self.query_lens = seq_lens, query_lens
        self.dtype, self.scale = dtype, head_dim ** -0.5
        blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
        num_blocks = sum(blocks_per_seq) + 3
        order = torch.randperm(num_blocks, generator=g).tolist()
        width = max(blocks_per_seq) + 1                        # tables padded with -1 past each sequence's end
        self.block_tables = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
        for i, n in enumerate(blocks_per_seq):
            self.block_tables[i, :n] = torch.tensor([order.pop() for _ in range(n)])
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache = torch.randn(shape, generator=g).to(dtype)
        self.v_cache = torch.randn(shape, generator=g).to(dtype)
        self.q = torch.randn(sum(query_lens), num_heads, head_dim, generator=g).to(dtype)
        self.cu_seqlens_q = torch.tensor([0] + list(torch.tensor(query_lens).cumsum(0)), dtype=torch.int32)

    def on_device(self, name: str) -> torch.Tensor:
        return getattr(self, name).to(DEVICE)

    def reference(self) -> torch.Tensor:
        """Causal attention per sequence, in float64, reading the context through the block table."""
        out = torch.empty(self.q.shape, dtype=torch.float64)
        block_size = self.k_cache.shape[1]
        group = self.q.shape[1] // self.k_cache.shape[2]
        for i, (seq_len, q_len) in enumerate(zip(self.seq_lens, self.query_lens)):
            pos = torch.arange(seq_len)
            slots = self.block_tables[i, pos // block_size].long() * block_size + pos % block_size
            k = self.k_cache.flatten(0, 1)[slots].double().repeat_interleave(group, 1)   # (S, H, hd)
            v = self.v_cache.flatten(0, 1)[slots].double().repeat_interleave(group, 1)   # (S, H, hd)
            rows = slice(int(self.cu_seqlens_q[i]), int(self.cu_seqlens_q[i + 1]))
            scores = torch.einsum("thd,shd->hts", self.q[rows].double(), k) * self.scale
            q_pos = torch.arange(seq_len - q_len, seq_len)
            scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
            out[rows] = torch.einsum("hts,shd->thd", scores.softmax(-1), v)
        return out

    def check(self, out: torch.Tensor) -> None:
        assert out.dtype == self.dtype and out.shape == self.q.shape
        torch.testing.assert_close(out.cpu().double(), self.reference(), **TOLERANCE[self.dtype])


context_lens = st.one_of(st.integers(1, MAX_CONTEXT), st.sampled_from(BOUNDARIES))


@st.composite
def paged_batches(draw, decode: bool) -> PagedBatch:
    seq_lens = draw(st.lists(context_lens, min_size=1, max_size=MAX_SEQS))
    if decode:
        query_lens = [1] * len(seq_lens)
    else:  # whole prompts, chunks after a cached prefix, and decode rows, mixed in one batch
        query_lens = [draw(st.one_of(st.just(min(n, MAX_NEW_TOKENS)), st.just(1),
                                     st.integers(1, min(n, MAX_NEW_TOKENS)))) for n in seq_lens]
    num_kv_heads = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 2, 4, 8]))
    return PagedBatch(seq_lens, query_lens, num_kv_heads * group, num_kv_heads,
                      head_dim=draw(st.sampled_from([32, 64, 128])), block_size=draw(st.sampled_from([16, 32])),
                      dtype=draw(st.sampled_from(list(TOLERANCE))), seed=draw(st.integers(0, 2**31 - 1)))


@settings(max_examples=EXAMPLES)
@given(batch=paged_batches(decode=False))
def test_varlen_attention_matches_reference(batch):
    out = varlen_attention(batch.on_device("q"), batch.on_device("k_cache"), batch.on_device("v_cache"),
                           batch.on_device("cu_seqlens_q"), torch.tensor(batch.seq_lens, dtype=torch.int32,
                                                                         device=DEVICE),
                           batch.on_device("block_tables"), max(batch.query_lens), batch.scale)
    batch.check(out)


@settings(max_examples=EXAMPLES)
@given(batch=paged_batches(decode=True), num_splits=st.sampled_from([1, 2, 3, 8]))
def test_paged_decode_attention_matches_reference(batch, num_splits):
    """num_splits 8 on a short context leaves splits with no keys at all; the reduce must ignore them."""
    out = paged_decode_attention(batch.on_device("q"), batch.on_device("k_cache"), batch.on_device("v_cache"),
                                 torch.tensor(batch.seq_lens, dtype=torch.int32, device=DEVICE),
                                 batch.on_device("block_tables"), max(batch.seq_lens), batch.scale,
                                 num_splits=num_splits)
    batch.check(out)


@settings(max_examples=EXAMPLES)
@given(num_tokens=st.integers(1, 40), num_kv_heads=st.sampled_from([1, 2, 8]),
       head_dim=st.sampled_from([32, 64, 128]), block_size=st.sampled_from([16, 32]),
       dtype=st.sampled_from(list(TOLERANCE)), data=st.data())
def test_store_kv_writes_each_slot_and_nothing_else(num_tokens, num_kv_heads, head_dim, block_size, dtype, data):
    num_blocks = math.ceil(num_tokens / block_size) + 2
    slots = data.draw(st.permutations(range(num_blocks * block_size)))[:num_tokens]
    skipped = data.draw(st.lists(st.booleans(), min_size=num_tokens, max_size=num_tokens))
    slot_mapping = torch.tensor([-1 if skip else s for s, skip in zip(slots, skipped)])
    g = torch.Generator().manual_seed(num_tokens)
    k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=g).to(dtype)
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g).to(dtype)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    keep = slot_mapping >= 0
    want_k.flatten(0, 1)[slot_mapping[keep]] = k[keep]
    want_v.flatten(0, 1)[slot_mapping[keep]] = v[keep]
    got_k, got_v = k_cache.to(DEVICE), v_cache.to(DEVICE)
    store_kv(k.to(DEVICE), v.to(DEVICE), got_k, got_v, slot_mapping.to(DEVICE))
    assert torch.equal(got_k.cpu(), want_k) and torch.equal(got_v.cpu(), want_v)  # a copy: bit for bit


def test_kernels_refuse_heads_that_do_not_group():
    batch = PagedBatch([5], [5], 3, 2, head_dim=32, block_size=16, dtype=torch.float32, seed=0)
    with pytest.raises(ValueError, match="cannot share"):
        varlen_attention(batch.q, batch.k_cache, batch.v_cache, batch.cu_seqlens_q, torch.tensor([5]),
                         batch.block_tables, 5, batch.scale)


# The kernels inside the engine

LONG_PROMPT = ("KING HENRY.\nOnce more unto the breach, dear friends, once more;\nOr close the wall up with our "
               "English dead.\nIn peace there's nothing so becomes a man\nAs modest stillness and humility:\n")
PROMPTS = [LONG_PROMPT, "ROMEO.\n", "JULIET.\nO Romeo, Romeo,", "HAMLET.\n", "FALSTAFF.\n"]
# fp16 logits of two correct implementations differ by ~1e-2, not ~1e-6 as in fp32.
E2E_DTYPE, E2E_NEAR_TIE_GAP = ("float16", 5e-2) if ON_GPU else ("float32", NEAR_TIE_GAP)


def test_bard_greedy_tokens_with_triton_equal_torch_backend():
    """Bard end to end: chunked prefill over a cached prefix, mixed prefill+decode steps and pure decode
    steps, with each backend. A token may differ only where the torch run's top-2 logit gap is a near-tie."""
    config = dict(device=DEVICE, dtype=E2E_DTYPE, max_num_seqs=3, max_num_batched_tokens=24,
                  enable_chunked_prefill=True, num_blocks=64)
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (12, 3, 6, 10, 5)]
    triton_llm, torch_llm = LLM(None, attn_backend="triton", **config), LLM(None, attn_backend="torch", **config)
    assert triton_llm.engine.runner.attn_backend == "triton"
    outputs = triton_llm.generate(PROMPTS, params, use_tqdm=False)
    got = [o.outputs[0].token_ids for o in outputs]
    want = [o.outputs[0].token_ids for o in torch_llm.generate(PROMPTS, params, use_tqdm=False)]

    steps = triton_llm.engine.trace.steps
    long_prompt_chunks = [s for s in steps if s.tokens.get(outputs[0].request_id, 0) > 1]
    assert len(long_prompt_chunks) >= 2, "the long prompt was not prefilled in chunks over a cached prefix"
    assert any(s.prefill_tokens and s.decode_tokens for s in steps), "no mixed prefill+decode step was run"
    assert any(s.decode_tokens and not s.prefill_tokens for s in steps), "no pure decode step was run"
    near_ties = count_near_ties(torch_llm.engine.runner, [torch_llm.engine.encode(p) for p in PROMPTS], got, want,
                                E2E_NEAR_TIE_GAP, what="triton")
    assert near_ties <= 1, f"{near_ties} of {len(PROMPTS)} requests diverged at near-ties"


def test_triton_backend_needs_the_interpreter_on_a_cpu(monkeypatch):
    assert unavailable_reason(torch.device(DEVICE)) is None           # this suite runs the kernels
    monkeypatch.setattr(minicb_kernels, "INTERPRETED", False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert "set TRITON_INTERPRET=1 before Python starts" in unavailable_reason(torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "was set after minicb_kernels was imported" in unavailable_reason(torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="attn_backend='triton' falls back to 'torch': .*TRITON_INTERPRET=1"):
        backend, name = select_backend("triton", torch.device("cpu"))
    assert name == "torch" and backend is BACKENDS["torch"]


def test_engine_without_triton_falls_back_and_still_serves(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "triton" else real_find_spec(name, *args))
    with pytest.warns(RuntimeWarning, match="Triton is not installed .*pip install triton"):
        llm = LLM(None, device="cpu", attn_backend="triton", num_blocks=16)
    assert llm.engine.runner.attn_backend == "torch"
    out = llm.generate("ROMEO.\n", SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
