"""minicb's own forward against Hugging Face transformers, on CPU in fp32.

References are always HF run on one prompt alone; minicb runs both alone and as a flat batch of
prompts of different lengths.
"""
from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_VARIANTS, compare_greedy, hf_greedy
from torch import nn

from minicb.llm import LLM
from minicb.model.packed_linear import PackedLinear, can_pack, pack_linears
from minicb.runner.batch import SequenceChunk
from minicb.runner.batch_builder import build_flat_batch
from minicb.runner.model_runner import ModelRunner
from minicb.sampling import SamplingParams

NEW_TOKENS = 64
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
BARD_PROMPTS = ["ROMEO.\n", "JULIET.\n", "HAMLET.\nTo be, or not to be", "KING LEAR.\n",
                "FALSTAFF.\nI am not only witty in myself, but the cause that wit is in other men.\n",
                "PORTIA.\nThe quality of mercy", "OTHELLO.\n", "LADY MACBETH.\nOut, damned spot!"]


def tiny_prompts(vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (1, 5, 17, 33, 8, 64)]


def check_greedy_parity(llm: LLM, hf_model, prompts: list, batched: bool) -> None:
    """Batched: every prompt is admitted in the first step, so they prefill as one flat batch
    and then decode together."""
    ids = [llm.engine.encode(p) for p in prompts]
    if batched:
        outputs = llm.generate(ids, GREEDY, use_tqdm=False)
    else:
        outputs = [llm.generate([p], GREEDY, use_tqdm=False)[0] for p in ids]
    results = [compare_greedy(o.outputs[0].token_ids, *hf_greedy(hf_model, p, NEW_TOKENS))
               for o, p in zip(outputs, ids)]
    near_ties = results.count("near-tie")
    # Near-ties are legitimate but rare; many of them would mean the logits are off.
    assert near_ties <= 1, f"{near_ties} of {len(ids)} sequences diverged at near-ties"


@pytest.mark.parametrize("llm", ["bard_llm", "bard_loop_llm"])
@pytest.mark.parametrize("batched", [False, True], ids=["solo", "flat-batch"])
def test_bard_greedy_matches_hf_generate(request, bard_hf, llm, batched):
    check_greedy_parity(request.getfixturevalue(llm), bard_hf, BARD_PROMPTS, batched)


@pytest.mark.parametrize("batched", [False, True], ids=["solo", "flat-batch"])
@pytest.mark.parametrize("variant", TINY_VARIANTS)
def test_tiny_architectures_greedy_match_hf_generate(tiny_checkpoint, variant, batched):
    folder, hf_model = tiny_checkpoint(variant)
    llm = LLM(str(folder), device="cpu", num_blocks=256, block_size=8)
    check_greedy_parity(llm, hf_model, tiny_prompts(hf_model.config.vocab_size, seed=1), batched)


def prefill_logits(runner: ModelRunner, prompts: list[list[int]]) -> torch.Tensor:
    """Last-position logits of every prompt, all prompts prefilled together in one flat batch."""
    chunks, next_block = [], 0
    for p in prompts:
        n = -(-len(p) // runner.block_size)
        chunks.append(SequenceChunk(p, 0, list(range(next_block, next_block + n))))
        next_block += n
    return runner.logits(build_flat_batch(chunks, runner.block_size))


@pytest.mark.parametrize("variant", ["bard"] + TINY_VARIANTS)
def test_last_position_logits_match_hf(request, variant):
    if variant == "bard":
        runner, hf_model = request.getfixturevalue("bard_runner"), request.getfixturevalue("bard_hf")
        prompts = [runner.tokenizer(p)["input_ids"] for p in BARD_PROMPTS]
    else:
        folder, hf_model = request.getfixturevalue("tiny_checkpoint")(variant)
        runner = ModelRunner(folder, device="cpu", num_blocks=256, block_size=8)
        prompts = tiny_prompts(hf_model.config.vocab_size, seed=2)
    got = prefill_logits(runner, prompts)
    with torch.no_grad():
        want = torch.stack([hf_model(torch.tensor([p])).logits[0, -1] for p in prompts]).float()
    assert (got - want).abs().max().item() < 1e-4


@pytest.mark.parametrize("split", [1, 7, 16, 22])
def test_prefill_in_two_chunks_equals_one_prefill(bard_runner, split):
    """The second chunk reads the first chunk's K/V from the paged cache: same logits as one pass."""
    prompt = bard_runner.tokenizer(BARD_PROMPTS[4])["input_ids"]
    table = [5, 2, 9]  # deliberately out of order: the block table, not memory order, defines the sequence
    whole = bard_runner.logits(build_flat_batch([SequenceChunk(prompt, 0, table)], 16))
    bard_runner.kv_cache.zero_()
    first = SequenceChunk(prompt[:split], 0, table, needs_logits=False)
    bard_runner.logits(build_flat_batch([first], 16))
    second = bard_runner.logits(build_flat_batch([SequenceChunk(prompt[split:], split, table)], 16))
    torch.testing.assert_close(second, whole, atol=1e-5, rtol=0)


def test_packed_linears_compute_what_the_dense_weights_do(bard_runner):
    """EngineConfig.pack_weights against F.linear on the dense weights, for 1 to 300 rows, with and without a
    bias. The engine's parity tests above run through the packed layers; a deepcopy of one (lesson 03 makes
    one) has no packed weight and computes densely."""
    if not can_pack(torch.device("cpu"), torch.float32):
        pytest.skip("minicb packs weights for oneDNN on an x86 CPU only")
    assert isinstance(bard_runner.model.lm_head, PackedLinear) and bard_runner.model.lm_head.packed is not None
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.Linear(1024, 256, bias=False))
    dense = copy.deepcopy(model)
    pack_linears(model)
    # MKL's path for a small matmul, and for a prompt's rows on the small weight (1024 x 256)
    for rows, dense_calls in ((1, 2), (16, 0), (300, 1)):
        x = torch.randn(rows, 512, generator=g)
        with torch.inference_mode(), mock.patch.object(F, "linear", wraps=F.linear) as linear:
            got = model(x)
        assert linear.call_count == dense_calls
        torch.testing.assert_close(got, F.linear(F.linear(x, dense[0].weight, dense[0].bias), dense[1].weight),
                                   atol=1e-4, rtol=1e-4)
    copied = copy.deepcopy(model[0])
    assert copied.packed is None
    torch.testing.assert_close(copied(x), dense[0](x))
