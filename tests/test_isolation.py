"""One request's NaN stays its own: attention never lets a masked cache position reach another sequence."""
from __future__ import annotations

import math

import pytest
import torch
from minicb_kernels import paged_decode_attention, store_kv
from test_attention import dense_causal_attention

from minicb.attention import BACKENDS
from minicb.engine import LLMEngine
from minicb.llm import LLM
from minicb.runner.batch import SequenceChunk
from minicb.runner.batch_builder import build_flat_batch
from minicb.sampling import SamplingParams
from minicb.scheduler.request import RequestOutput


def batch_over_nan_garbage(shapes: list[tuple[int, int]]) -> tuple[tuple, torch.Tensor]:
    """A batch of (computed prefix, new tokens) sequences whose caches hold NaN in every slot no sequence owns:
    block 0 (where padding points) and the tails of the last blocks. Returns the attention inputs
    (q, k, v, k_cache, v_cache, meta) and the dense attention over each real context alone."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, hd, block_size, num_blocks = 4, 2, 8, 4, 16
    k_cache = torch.full((num_blocks, block_size, kv_heads, hd), float("nan"))
    v_cache = torch.full_like(k_cache, float("nan"))
    free = list(range(num_blocks - 1, 0, -1))   # block 0 stays garbage
    tables, qs, ks, vs, want = [], [], [], [], []
    for computed, new in shapes:
        total = computed + new
        table = [free.pop() for _ in range(math.ceil(total / block_size))]
        k_all = torch.randn(total, kv_heads, hd, generator=g)      # (S, n_kv, hd)
        v_all = torch.randn(total, kv_heads, hd, generator=g)      # (S, n_kv, hd)
        for pos in range(computed):
            k_cache[table[pos // block_size], pos % block_size] = k_all[pos]
            v_cache[table[pos // block_size], pos % block_size] = v_all[pos]
        tables.append(table)
        qs.append(torch.randn(new, heads, hd, generator=g))         # (t, H, hd)
        ks.append(k_all[computed:])
        vs.append(v_all[computed:])
        want.append(dense_causal_attention(qs[-1], k_all, v_all, hd ** -0.5))
    chunks = [SequenceChunk([0] * new, computed, table) for (computed, new), table in zip(shapes, tables)]
    meta = build_flat_batch(chunks, block_size).attn
    return (torch.cat(qs), torch.cat(ks), torch.cat(vs), k_cache, v_cache, meta), torch.cat(want)


# flex hands batches this small to torch; tests/test_attention.py runs it over NaN garbage at its own sizes.
@pytest.mark.parametrize("backend", [name for name in BACKENDS if name != "flex"])
@pytest.mark.parametrize("shapes", [[(4, 1), (13, 1), (0, 1)], [(0, 5), (9, 3), (6, 1)]], ids=["decode", "mixed"])
def test_nan_in_unowned_cache_slots_does_not_reach_the_output(backend, shapes):
    inputs, want = batch_over_nan_garbage(shapes)
    out = BACKENDS[backend](*inputs, scale=inputs[0].shape[-1] ** -0.5)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_split_kv_decode_ignores_nan_garbage():
    """Split-KV runs only on a GPU by default; forced here, its empty splits and reduce must stay clean too."""
    (q, k, v, k_cache, v_cache, meta), want = batch_over_nan_garbage([(4, 1), (13, 1), (0, 1)])
    store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
    out = paged_decode_attention(q, k_cache, v_cache, meta.seq_lens, meta.block_tables, meta.max_seq_len,
                                 q.shape[-1] ** -0.5, num_splits=3)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


POISON = 7   # a token id whose input embedding the test turns into NaN


def bard_engine(backend: str, poisoned: bool) -> LLMEngine:
    """A small pool (8 blocks of 4 tokens), so freed blocks soon come round again, and short prefill chunks, so
    a prompt's blocks can be seen between its chunks."""
    engine = LLMEngine(device="cpu", attn_backend=backend, max_num_seqs=4, num_blocks=8, block_size=4,
                       max_model_len=32, enable_chunked_prefill=True, long_prefill_token_threshold=4)
    if poisoned:
        poison(engine)
    return engine


def poison(engine: LLMEngine) -> None:
    """Turn token POISON's input embedding into NaN: a sequence that holds it gets NaN logits."""
    embedding = engine.runner.model.model.embed_tokens
    with torch.no_grad():
        # Bard ties the LM head to the embedding; a copy keeps the head clean, so only inputs go NaN.
        embedding.weight = torch.nn.Parameter(embedding.weight.detach().clone())
        embedding.weight[POISON] = float("nan")


def run_until_done(engine: LLMEngine) -> dict[str, RequestOutput]:
    results = {}
    while engine.has_unfinished_requests():
        results.update((o.request_id, o) for o in engine.step() if o.finished)
    return results


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # the interpreter, on the NaN
@pytest.mark.parametrize("backend,max_tokens", [("torch", 10), ("torch-loop", 10), ("triton", 2)])
def test_a_nan_request_fails_alone_and_its_blocks_serve_the_next_one_cleanly(backend, max_tokens):
    """The poisoned request holds block 0, where the torch backend's padding points, while two others share
    its steps; after it fails, a later request takes its freed blocks, stale NaN tail and all. Each other
    request's tokens equal its solo run on a clean engine."""
    engine = bard_engine(backend, poisoned=True)
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    prompts = {"poisoned": [POISON] + engine.encode("ROMEO.\nO"),   # every K/V it writes is NaN
               "short": engine.encode("JULIET.\n"), "long": engine.encode("FRIAR LAURENCE.\nHoly"),
               "reuser": engine.encode("NURSE.\nMy")}
    for rid in ("poisoned", "short", "long"):
        engine.add_request(prompts[rid], params, request_id=rid)
    results = {o.request_id: o for o in engine.step() if o.finished}
    poisoned_blocks = set(engine.scheduler.kv.tables["poisoned"])   # its first chunk is cached, as NaN
    assert 0 in poisoned_blocks
    engine.add_request(prompts["reuser"], params, request_id="reuser")
    reused = False
    while engine.has_unfinished_requests():
        results.update((o.request_id, o) for o in engine.step() if o.finished)
        reused |= bool(set(engine.scheduler.kv.tables.get("reuser", ())) & poisoned_blocks)

    poisoned = results.pop("poisoned")
    assert poisoned.outputs[0].finish_reason == "error" and "NaN" in poisoned.reason
    assert {rid: o.reason for rid, o in results.items() if o.outputs[0].finish_reason != "length"} == {}
    assert reused   # the setup this test relies on
    clean = bard_engine(backend, poisoned=False)
    for rid, output in results.items():
        clean.add_request(prompts[rid], params, request_id=rid)
        solo = run_until_done(clean)[rid]
        assert output.outputs[0].token_ids == solo.outputs[0].token_ids, rid


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_offline_generate_returns_every_healthy_result_and_says_why_one_failed():
    """One prompt's logits go NaN, another asks for temperature 1e-40 (which overflows fp32 unless it is greedy):
    generate returns all four results, the failed one with finish_reason "error" and why, and each healthy one
    with the tokens it gets in the same batch without the failing request."""
    llm = LLM(None, device="cpu", num_blocks=64)
    poison(llm.engine)
    encode = llm.engine.encode
    prompts = ["ROMEO.\n", [POISON] + encode("JULIET.\n"), "NURSE.\n", "ROMEO.\n"]
    length = dict(max_tokens=12, ignore_eos=True)
    params = [SamplingParams(temperature=1e-40, **length), SamplingParams(temperature=0.8, seed=1, **length),
              SamplingParams(temperature=0.8, seed=2, **length), SamplingParams(temperature=0, **length)]
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].finish_reason for o in outs] == ["length", "error", "length", "length"]
    assert "NaN" in outs[1].reason and "failed alone" in outs[1].reason
    without = llm.generate(prompts[:1] + prompts[2:], params[:1] + params[2:], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs[:1] + outs[2:]] == [o.outputs[0].token_ids for o in without]
    assert outs[0].outputs[0].token_ids == outs[3].outputs[0].token_ids, "1e-40 is greedy, as temperature 0"
