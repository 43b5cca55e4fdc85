"""Lesson 03's task, graded on the implementation MINICB_IMPL picks (make test: the solutions)."""
from __future__ import annotations

import torch

from minicb import course
from minicb.batch import SequenceChunk
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson03_selective")

# A prefill of 3 tokens in block 3; a decode at position 17 (its second block is 2); a chunk of
# 2 tokens after 4 cached ones in block 1, which is not the prompt's end (no logits).
CHUNKS = [SequenceChunk([5, 6, 7], 0, [3]), SequenceChunk([8], 17, [0, 2]),
          SequenceChunk([9, 10], 4, [1], needs_logits=False)]


def test_lesson03_task1_every_field_of_a_three_sequence_batch():
    batch = mine.build_flat_batch(CHUNKS, 16)
    attn = batch.attn
    assert batch.input_ids.tolist() == [5, 6, 7, 8, 9, 10]
    assert batch.positions.tolist() == [0, 1, 2, 17, 4, 5]
    assert attn.cu_seqlens_q.tolist() == [0, 3, 4, 6]
    assert attn.seq_lens.tolist() == [3, 18, 6]
    assert attn.slot_mapping.tolist() == [48, 49, 50, 33, 20, 21]
    assert attn.block_tables.tolist() == [[3, -1], [0, 2], [1, -1]]
    assert (attn.max_seqlen_q, attn.max_seq_len) == (3, 18)
    assert batch.logits_indices.tolist() == [2, 3]
    assert batch.input_ids.dtype == batch.positions.dtype == attn.slot_mapping.dtype == torch.int64
    assert attn.cu_seqlens_q.dtype == attn.seq_lens.dtype == attn.block_tables.dtype == torch.int32


def test_lesson03_task1_padding_writes_no_kv():
    batch = mine.build_flat_batch([SequenceChunk([1, 2], 0, [0]), SequenceChunk([0, 0], 3, [4, 5], False, False)], 4)
    assert batch.attn.slot_mapping.tolist() == [0, 1, -1, -1]
    assert batch.logits_indices.tolist() == [1]


def test_lesson03_task1_bard_generates_the_same_on_your_batches():
    prompts = ["ROMEO.\n", "JULIET.\nO Romeo,", "HAMLET.\n"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 3, 5)]
    config = dict(device="cpu", max_num_seqs=2, num_blocks=32)
    yours = LLM(None, parts=EngineParts(build_flat_batch=mine.build_flat_batch), **config)
    reference = LLM(None, **config)
    got = [o.outputs[0].token_ids for o in yours.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in reference.generate(prompts, params, use_tqdm=False)]
    assert got == want   # the same batches give bit-identical logits, so no near-tie allowance is needed
