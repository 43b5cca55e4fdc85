"""Lesson 03's task, graded on the implementation MINICB_IMPL picks (make test: the solutions).

Two kinds of check. The contract: on random steps (hypothesis draws the chunks and shrinks a failure to
the smallest step that shows it), every field of your batch against the rule it must meet, where the
expected values come from minicb's own builder called on the same chunks; a failure names the rule, the
chunk and the step in words. The outcome: Bard generates the same tokens on your batches as on
minicb's, with every batch the engine asks for checked against the contract on its way in."""
from __future__ import annotations

from typing import Callable

import pytest
import torch
from grading import obeying
from hypothesis import given, settings
from hypothesis import strategies as st

import minicb.runner.batch_builder
from minicb import course
from minicb.attention.metadata import AttentionMetadata
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.runner.batch import FlatBatch, SequenceChunk
from minicb.runner.batch_builder import build_flat_batch as minicb_build_flat_batch
from minicb.sampling import SamplingParams

mine = course.lesson("lesson03_selective")
Builder = Callable[..., FlatBatch]

# A prefill of 3 tokens in block 3; a decode at position 17 (its second block is 2); a chunk of
# 2 tokens after 4 computed ones in block 1, which is not the prompt's end (no logits).
CHUNKS = [SequenceChunk([5, 6, 7], 0, [3]), SequenceChunk([8], 17, [0, 2]),
          SequenceChunk([9, 10], 4, [1], needs_logits=False)]
SLOT_RULE = "each row's K/V goes to the cache slot that holds its position in the sequence's blocks"

ROWS_RULE = "cu_seqlens_q: 0, then where each chunk's rows end, chunk after chunk"
INPUT_RULE = "input_ids: every chunk's token_ids, in its own rows"
POSITION_RULE = ("positions: a row's position counts every token of its sequence before it, the num_computed "
                 "ones already in the cache included")
SEQ_LEN_RULE = "seq_lens: the context attention reads, the num_computed tokens and this step's together"
TABLE_RULE = "block_tables: row i is chunk i's block_table, the shorter tables padded with -1"
PADDING_RULE = "slot_mapping: a chunk with write_kv False writes nothing: -1 in each of its rows"
LOGITS_RULE = ("logits_indices: for each chunk with needs_logits, the row whose hidden state predicts the "
               "sequence's next token: the chunk's last")
MAX_RULE = "max_query_len and max_seq_len: plain ints, the most rows of one chunk and the longest seq_len"
FIELD_RULES = {"input_ids": INPUT_RULE, "positions": POSITION_RULE, "logits_indices": LOGITS_RULE,
               "slot_mapping": f"slot_mapping: {SLOT_RULE}", "cu_seqlens_q": ROWS_RULE, "seq_lens": SEQ_LEN_RULE,
               "block_tables": TABLE_RULE}
DTYPES = {"input_ids": torch.int64, "positions": torch.int64, "logits_indices": torch.int64,
          "slot_mapping": torch.int64, "cu_seqlens_q": torch.int32, "seq_lens": torch.int32,
          "block_tables": torch.int32}


def check(field: str, got, want, rule: str) -> None:
    got = got.tolist() if isinstance(got, torch.Tensor) else got
    assert got == want, f"{field}: {rule} (got {got}, want {want})"


def describe(chunks: list[SequenceChunk], block_size: int) -> str:
    """A step in words, as a failure message shows it."""
    def one(i: int, c: SequenceChunk) -> str:
        flags = "".join([", no logits" * (not c.needs_logits), ", padding (write_kv False)" * (not c.write_kv)])
        return f"chunk {i}: {len(c.token_ids)} new after {c.num_computed} computed, blocks {c.block_table}{flags}"
    return f"block_size {block_size}; " + "; ".join(one(i, c) for i, c in enumerate(chunks))


def fields(batch: FlatBatch) -> dict[str, torch.Tensor]:
    attn = batch.attn
    return {"input_ids": batch.input_ids, "positions": batch.positions, "logits_indices": batch.logits_indices,
            "slot_mapping": attn.slot_mapping, "cu_seqlens_q": attn.cu_seqlens_q, "seq_lens": attn.seq_lens,
            "block_tables": attn.block_tables}


def where_in_cache(slot: int, block_size: int) -> str:
    return f"slot {slot} (block {slot // block_size}, row {slot % block_size})" if slot >= 0 else "slot -1 (no write)"


def check_flat_batch(build: Builder, chunks: list[SequenceChunk], block_size: int,
                     device: torch.device | str = "cpu") -> FlatBatch:
    """build(chunks, block_size, device) meets the contract, field by field; the first rule it breaks fails,
    naming the rule, the chunk and the step. Returns the batch."""
    step = describe(chunks, block_size)
    batch = obeying(f"build_flat_batch makes a FlatBatch of any valid step ({step})", build, chunks, block_size,
                    device)

    def broken(rule: str, detail: str) -> None:
        pytest.fail(f"{rule}. {detail}. The step: {step}", pytrace=False)

    if not isinstance(batch, FlatBatch) or not isinstance(batch.attn, AttentionMetadata):
        broken("build_flat_batch returns a FlatBatch whose attn is an AttentionMetadata",
               f"got {type(batch).__name__} with attn {type(getattr(batch, 'attn', None)).__name__}")
    want = minicb_build_flat_batch(chunks, block_size)
    for name, tensor in fields(batch).items():
        expected = fields(want)[name]
        if not isinstance(tensor, torch.Tensor):
            broken(f"{name}: a tensor", f"got {type(tensor).__name__}")
        if tensor.dtype != DTYPES[name] or torch.device(tensor.device).type != torch.device(device).type:
            broken(f"{name}: {DTYPES[name]} on `device` ({device})", f"got {tensor.dtype} on {tensor.device}")
        if tensor.shape != expected.shape:
            broken(FIELD_RULES[name], f"{name} has shape {tuple(expected.shape)} for this step, got "
                                      f"{tuple(tensor.shape)}")
    if torch.device(device).type == "meta":   # placement only: a meta tensor holds no values
        return batch
    got = {name: tensor.tolist() for name, tensor in fields(batch).items()}
    ref = {name: tensor.tolist() for name, tensor in fields(want).items()}
    if got["cu_seqlens_q"] != ref["cu_seqlens_q"]:
        broken(ROWS_RULE, f"got {got['cu_seqlens_q']}, want {ref['cu_seqlens_q']}")
    cu = ref["cu_seqlens_q"]
    for i, chunk in enumerate(chunks):
        rows = slice(cu[i], cu[i + 1])
        of = f"chunk {i} ({len(chunk.token_ids)} new after {chunk.num_computed} computed), rows {cu[i]}:{cu[i + 1]}"
        if got["input_ids"][rows] != ref["input_ids"][rows]:
            broken(INPUT_RULE, f"{of}: got {got['input_ids'][rows]}, want {chunk.token_ids}")
        if got["positions"][rows] != ref["positions"][rows]:
            broken(POSITION_RULE, f"{of}: got {got['positions'][rows]}, want {ref['positions'][rows]}")
        if got["seq_lens"][i] != ref["seq_lens"][i]:
            broken(SEQ_LEN_RULE, f"{of}: got {got['seq_lens'][i]}, want {ref['seq_lens'][i]}")
        if got["block_tables"][i] != ref["block_tables"][i]:
            broken(TABLE_RULE, f"{of}: row {i} is {got['block_tables'][i]}, want {ref['block_tables'][i]}")
        if not chunk.write_kv and got["slot_mapping"][rows] != ref["slot_mapping"][rows]:
            broken(PADDING_RULE, f"{of}: got {got['slot_mapping'][rows]}")
        for row in range(cu[i], cu[i + 1]):
            if got["slot_mapping"][row] != ref["slot_mapping"][row]:
                broken(f"slot_mapping: {SLOT_RULE}",
                       f"{of}: row {row} is position {ref['positions'][row]}, which lives in "
                       f"{where_in_cache(ref['slot_mapping'][row], block_size)}; yours is "
                       f"{where_in_cache(got['slot_mapping'][row], block_size)}")
    if got["logits_indices"] != ref["logits_indices"]:
        sampled = [i for i, c in enumerate(chunks) if c.needs_logits]
        broken(LOGITS_RULE, f"chunks {sampled} need logits: got rows {got['logits_indices']}, want "
                            f"{ref['logits_indices']}")
    attn = batch.attn
    if not (type(attn.max_query_len) is int and type(attn.max_seq_len) is int) \
            or (attn.max_query_len, attn.max_seq_len) != (want.attn.max_query_len, want.attn.max_seq_len):
        broken(MAX_RULE, f"got {attn.max_query_len!r} and {attn.max_seq_len!r}, want {want.attn.max_query_len} and "
                         f"{want.attn.max_seq_len}")
    return batch


@st.composite
def steps(draw) -> tuple[list[SequenceChunk], int]:
    """A step of 1 to 4 chunks: prefills (nothing computed), chunks after a computed prefix, decodes (one new
    token), padding; block tables of shuffled block ids that may run a block past the context."""
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    shapes = draw(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 24), st.integers(0, 1), st.booleans(),
                                     st.booleans()), min_size=1, max_size=4))
    sizes = [-(-(new + computed) // block_size) + spare for new, computed, spare, _, _ in shapes]
    blocks = draw(st.permutations(range(sum(sizes))))
    chunks, start = [], 0
    for (new, computed, _, padding, no_logits), size in zip(shapes, sizes):
        chunks.append(SequenceChunk(draw(st.lists(st.integers(0, 2047), min_size=new, max_size=new)), computed,
                                    list(blocks[start:start + size]), needs_logits=not (padding or no_logits),
                                    write_kv=not padding))
        start += size
    return chunks, block_size


def check_flat_batch_contract(build: Builder, max_examples: int = 150) -> None:
    """check_flat_batch on random steps; hypothesis shrinks a failure to the smallest step that shows it."""
    @settings(max_examples=max_examples, deadline=None, report_multiple_bugs=False)
    @given(step=steps())
    def meets_the_contract(step):
        chunks, block_size = step
        check_flat_batch(build, chunks, block_size)

    meets_the_contract()


def checked_at_the_seam(build: Builder) -> Builder:
    """build, with every batch the engine asks for checked against the contract before the model sees it."""
    def build_and_check(chunks: list[SequenceChunk], block_size: int, device: torch.device | str = "cpu") -> FlatBatch:
        return check_flat_batch(build, chunks, block_size, device)
    return build_and_check


# Prompts chunked over several steps in 4-token blocks (chunks after a computed prefix, some without logits,
# beside decodes), and the padded static baseline (padding rows, which must write nothing).
ENGINES = {"chunked prefill": dict(enable_chunked_prefill=True, max_num_batched_tokens=8, block_size=4),
           "padded": dict(batching="padded")}


def check_engine_outcome(build: Builder, engine: str) -> None:
    """Bard, on build's batches (each checked on its way in), generates what it generates on minicb's."""
    prompts = ["ROMEO.\n", "JULIET.\nO Romeo,", "HAMLET.\n"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 3, 5)]
    config = dict(device="cpu", max_num_seqs=2, num_blocks=32, **ENGINES[engine])
    yours = LLM(None, parts=EngineParts(build_flat_batch=checked_at_the_seam(build)), **config)
    reference = LLM(None, **config)
    got = [o.outputs[0].token_ids for o in yours.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in reference.generate(prompts, params, use_tqdm=False)]
    assert got == want, f"the engine ({engine}) on your batches generates what it generates on minicb's: the same " \
                        "batches give bit-identical logits"


def test_lesson03_task1_every_field_of_a_three_sequence_batch():
    batch = mine.build_flat_batch(CHUNKS, 16)
    attn = batch.attn
    check("input_ids", batch.input_ids, [5, 6, 7, 8, 9, 10], "every chunk's token_ids, concatenated in chunk order")
    check("positions", batch.positions, [0, 1, 2, 17, 4, 5],
          "a chunk's tokens sit at num_computed, num_computed + 1, ...")
    check("cu_seqlens_q", attn.cu_seqlens_q, [0, 3, 4, 6], "0, then the running total of each chunk's token count")
    check("seq_lens", attn.seq_lens, [3, 18, 6], "each sequence's num_computed + len(token_ids)")
    check("slot_mapping", attn.slot_mapping, [48, 49, 50, 33, 20, 21], SLOT_RULE)
    check("block_tables", attn.block_tables, [[3, -1], [0, 2], [1, -1]],
          "one row per sequence, padded with -1 to the longest table")
    check("max_query_len", attn.max_query_len, 3, "the longest chunk's number of new tokens")
    check("max_seq_len", attn.max_seq_len, 18, "the largest seq_len")
    check("logits_indices", batch.logits_indices, [2, 3],
          "the row of each chunk's last token, only for chunks with needs_logits")


def test_lesson03_task1_a_chunk_across_a_block_boundary():
    batch = mine.build_flat_batch([SequenceChunk([1, 2, 3], 2, [5, 7])], 4)
    check("positions", batch.positions, [2, 3, 4], "a chunk's tokens sit at num_computed, num_computed + 1, ...")
    check("slot_mapping", batch.attn.slot_mapping, [22, 23, 28],
          SLOT_RULE + ": position 4 is the first slot of block 7")
    check("seq_lens", batch.attn.seq_lens, [5], "each sequence's num_computed + len(token_ids)")


def test_lesson03_task1_padding_writes_no_kv():
    batch = mine.build_flat_batch([SequenceChunk([1, 2], 0, [0]), SequenceChunk([0, 0], 3, [4, 5], False, False)], 4)
    check("slot_mapping", batch.attn.slot_mapping, [0, 1, -1, -1], "-1 for every token of a chunk with write_kv False")
    check("logits_indices", batch.logits_indices, [1], "only chunks with needs_logits get a row")


# torch's meta device exists on every machine, so a builder that ignores `device` fails here too.
@pytest.mark.parametrize("device", ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else []))
def test_lesson03_task1_dtypes_and_device(device):
    check_flat_batch(mine.build_flat_batch, CHUNKS, 16, device)


def test_lesson03_task1_the_contract_on_random_steps():
    check_flat_batch_contract(mine.build_flat_batch)


def check_computes_every_field_itself(module, monkeypatch) -> None:
    """module's build_flat_batch builds the batch with minicb's own refusing to run: by its module's name, and by
    any name module imported it under."""
    assert module.build_flat_batch is not minicb_build_flat_batch, \
        "build_flat_batch is minicb's own here: write yours in exercises/lesson03_selective.py"

    def refuse(*args, **kwargs):
        raise AssertionError("build_flat_batch must compute the fields itself, not call minicb's")

    monkeypatch.setattr(minicb.runner.batch_builder, "build_flat_batch", refuse)
    for name, value in list(vars(module).items()):
        if value is minicb_build_flat_batch:
            monkeypatch.setattr(module, name, refuse)
    check("slot_mapping", module.build_flat_batch(CHUNKS, 16).attn.slot_mapping, [48, 49, 50, 33, 20, 21], SLOT_RULE)


def test_lesson03_task1_computes_every_field_itself(monkeypatch):
    """The reference is minicb's builder itself; yours must not hand the batch to it."""
    if mine.__name__.startswith("solutions."):
        assert mine.build_flat_batch is minicb_build_flat_batch, "the reference is minicb's own builder"
        return
    check_computes_every_field_itself(mine, monkeypatch)


@pytest.mark.parametrize("engine", ENGINES)
def test_lesson03_task1_bard_generates_the_same_on_your_batches(engine):
    check_engine_outcome(mine.build_flat_batch, engine)
