"""Lesson 03's task, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Every field is checked on its own, and a failure names the rule it broke."""
from __future__ import annotations

import pytest
import torch

import minicb.batch
from minicb import course
from minicb.batch import FlatBatch, SequenceChunk
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson03_selective")

# A prefill of 3 tokens in block 3; a decode at position 17 (its second block is 2); a chunk of
# 2 tokens after 4 cached ones in block 1, which is not the prompt's end (no logits).
CHUNKS = [SequenceChunk([5, 6, 7], 0, [3]), SequenceChunk([8], 17, [0, 2]),
          SequenceChunk([9, 10], 4, [1], needs_logits=False)]
SLOT_RULE = ("token at position p of a sequence goes to block_table[p // block_size] * block_size + "
             "p % block_size")


def check(field: str, got, want, rule: str) -> None:
    got = got.tolist() if isinstance(got, torch.Tensor) else got
    assert got == want, f"{field}: {rule} (got {got}, want {want})"


def test_lesson03_task1_every_field_of_a_three_sequence_batch():
    batch = mine.build_flat_batch(CHUNKS, 16)
    attn = batch.attn
    check("input_ids", batch.input_ids, [5, 6, 7, 8, 9, 10], "every chunk's token_ids, concatenated in chunk order")
    check("positions", batch.positions, [0, 1, 2, 17, 4, 5], "a chunk's tokens sit at num_cached, num_cached + 1, ...")
    check("cu_seqlens_q", attn.cu_seqlens_q, [0, 3, 4, 6], "0, then the running total of each chunk's token count")
    check("seq_lens", attn.seq_lens, [3, 18, 6], "each sequence's num_cached + len(token_ids)")
    check("slot_mapping", attn.slot_mapping, [48, 49, 50, 33, 20, 21], SLOT_RULE)
    check("block_tables", attn.block_tables, [[3, -1], [0, 2], [1, -1]],
          "one row per sequence, padded with -1 to the longest table")
    check("max_seqlen_q", attn.max_seqlen_q, 3, "the longest chunk's number of new tokens")
    check("max_seq_len", attn.max_seq_len, 18, "the largest seq_len")
    check("logits_indices", batch.logits_indices, [2, 3],
          "the row of each chunk's last token, only for chunks with needs_logits")


def test_lesson03_task1_a_chunk_across_a_block_boundary():
    batch = mine.build_flat_batch([SequenceChunk([1, 2, 3], 2, [5, 7])], 4)
    check("positions", batch.positions, [2, 3, 4], "a chunk's tokens sit at num_cached, num_cached + 1, ...")
    check("slot_mapping", batch.attn.slot_mapping, [22, 23, 28],
          SLOT_RULE + ": position 4 is the first slot of block 7")
    check("seq_lens", batch.attn.seq_lens, [5], "each sequence's num_cached + len(token_ids)")


def test_lesson03_task1_padding_writes_no_kv():
    batch = mine.build_flat_batch([SequenceChunk([1, 2], 0, [0]), SequenceChunk([0, 0], 3, [4, 5], False, False)], 4)
    check("slot_mapping", batch.attn.slot_mapping, [0, 1, -1, -1], "-1 for every token of a chunk with write_kv False")
    check("logits_indices", batch.logits_indices, [1], "only chunks with needs_logits get a row")


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_lesson03_task1_dtypes_and_device(device):
    batch = mine.build_flat_batch(CHUNKS, 16, device)
    attn = batch.attn
    for name, tensor, dtype in [("input_ids", batch.input_ids, torch.int64),
                                ("positions", batch.positions, torch.int64),
                                ("logits_indices", batch.logits_indices, torch.int64),
                                ("slot_mapping", attn.slot_mapping, torch.int64),
                                ("cu_seqlens_q", attn.cu_seqlens_q, torch.int32),
                                ("seq_lens", attn.seq_lens, torch.int32),
                                ("block_tables", attn.block_tables, torch.int32)]:
        assert tensor.dtype == dtype, f"{name}: {dtype} (got {tensor.dtype})"
        assert tensor.device.type == device, f"{name}: every tensor is on `device` ({device}; got {tensor.device})"
    assert isinstance(attn.max_seqlen_q, int) and isinstance(attn.max_seq_len, int), \
        "max_seqlen_q and max_seq_len: plain ints, so kernels size their grids without reading the device"


def test_lesson03_task1_computes_every_field_itself(monkeypatch):
    """The reference is minicb's builder itself; yours must not hand the batch to it."""
    if mine.__name__.startswith("solutions."):
        assert mine.build_flat_batch is minicb.batch.build_flat_batch, "the reference is minicb's own builder"
        return
    assert mine.build_flat_batch is not minicb.batch.build_flat_batch, \
        "build_flat_batch is minicb's own here: write yours in exercises/lesson03_selective.py"

    def refuse(*args, **kwargs):
        raise AssertionError("build_flat_batch must compute the fields itself, not call minicb's")

    monkeypatch.setattr(minicb.batch, "build_flat_batch", refuse)
    monkeypatch.setattr(FlatBatch, "build", staticmethod(refuse))
    check("slot_mapping", mine.build_flat_batch(CHUNKS, 16).attn.slot_mapping, [48, 49, 50, 33, 20, 21], SLOT_RULE)


def test_lesson03_task1_bard_generates_the_same_on_your_batches():
    prompts = ["ROMEO.\n", "JULIET.\nO Romeo,", "HAMLET.\n"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 3, 5)]
    config = dict(device="cpu", max_num_seqs=2, num_blocks=32)
    yours = LLM(None, parts=EngineParts(build_flat_batch=mine.build_flat_batch), **config)
    reference = LLM(None, **config)
    got = [o.outputs[0].token_ids for o in yours.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in reference.generate(prompts, params, use_tqdm=False)]
    assert got == want, "the engine on your batches generates what it generates on minicb's: the same batches " \
                        "give bit-identical logits"
