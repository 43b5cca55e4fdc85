"""Lesson 05's task, graded on the implementation MINICB_IMPL picks (make test: the solutions). On a
CPU the kernel runs under TRITON_INTERPRET=1, which tests/conftest.py sets before any kernel exists."""
from __future__ import annotations

import pytest
import torch
from test_kernels import DEVICE, PagedBatch

from minicb import course
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson05_triton")


@pytest.mark.parametrize("seq_lens,heads,kv_heads,head_dim,block_size,dtype", [
    ([1, 16, 17, 100], 4, 4, 32, 16, torch.float32),      # a single token, a block edge, one past it
    ([33, 5], 8, 2, 64, 32, torch.float16),                # GQA 4
    ([70, 64, 1], 8, 1, 32, 16, torch.bfloat16),           # GQA 8, a tile edge
])
def test_lesson05_task1_matches_attention_written_out(seq_lens, heads, kv_heads, head_dim, block_size, dtype):
    batch = PagedBatch(seq_lens, [1] * len(seq_lens), heads, kv_heads, head_dim, block_size, dtype, seed=len(seq_lens))
    out = mine.paged_decode_attention(batch.on_device("q"), batch.on_device("k_cache"), batch.on_device("v_cache"),
                                      torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE),
                                      batch.on_device("block_tables"), max(seq_lens), batch.scale)
    batch.check(out)


def test_lesson05_task1_bard_decodes_with_your_kernel():
    prompts = ["ROMEO.\n", "JULIET.\nO Romeo,"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (5, 3)]
    config = dict(device=DEVICE, dtype="float32", attn_backend="triton", max_num_seqs=2, num_blocks=16)
    yours = LLM(None, parts=EngineParts(paged_decode_attention=mine.paged_decode_attention), **config)
    reference = LLM(None, **config)
    got = [o.outputs[0].token_ids for o in yours.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in reference.generate(prompts, params, use_tqdm=False)]
    assert got == want
