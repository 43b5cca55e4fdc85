"""Negative controls for lesson 03's grader: plausible wrong builders, each minicb's own with one
learner's mistake, must each fail the contract naming the rule it breaks."""
from __future__ import annotations

import dataclasses
import re
import types

import pytest
from _pytest.outcomes import Failed

from minicb.runner.batch import FlatBatch, SequenceChunk
from minicb.runner.batch_builder import build_flat_batch

from test_lesson03_selective import (
    CHUNKS, LOGITS_RULE, PADDING_RULE, POSITION_RULE, TABLE_RULE, check_computes_every_field_itself,
    check_engine_outcome, check_flat_batch, check_flat_batch_contract)


def ignores_num_computed(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """Every chunk is taken for a whole prompt: its positions (and slots, and seq_len) start at 0."""
    return build_flat_batch([dataclasses.replace(c, num_computed=0) for c in chunks], block_size, device)


def writes_padding(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """write_kv is never read: padding rows get their slots like any others."""
    return build_flat_batch([dataclasses.replace(c, write_kv=True) for c in chunks], block_size, device)


def samples_the_first_token(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """The logits row of a chunk is where it starts, not where it ends."""
    batch = build_flat_batch(chunks, block_size, device)
    starts = batch.attn.cu_seqlens_q[:-1].long()
    batch.logits_indices = starts[[c.needs_logits for c in chunks]].to(device)
    return batch


def samples_every_chunk(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """needs_logits is never read: a chunk in the middle of its prompt gets a logits row too."""
    return build_flat_batch([dataclasses.replace(c, needs_logits=True) for c in chunks], block_size, device)


def pads_tables_with_zeros(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """The block tables are laid into torch.zeros: their padding is block 0, a real block."""
    batch = build_flat_batch(chunks, block_size, device)
    batch.attn.block_tables = batch.attn.block_tables.clamp(min=0)
    return batch


def ignores_device(chunks: list[SequenceChunk], block_size: int, device="cpu") -> FlatBatch:
    """Every tensor is made on the CPU, whatever `device` says."""
    return build_flat_batch(chunks, block_size)


def test_a_builder_that_ignores_device_fails_on_any_machine():
    with pytest.raises(Failed, match="^" + re.escape("input_ids: torch.int64 on `device` (meta)")):
        check_flat_batch(ignores_device, CHUNKS, 16, "meta")


@pytest.mark.parametrize("builder,rule", [
    pytest.param(builder, rule, id=builder.__name__) for builder, rule in [
        (ignores_num_computed, POSITION_RULE), (writes_padding, PADDING_RULE), (samples_the_first_token, LOGITS_RULE),
        (samples_every_chunk, LOGITS_RULE), (pads_tables_with_zeros, TABLE_RULE)]])
def test_a_wrong_builder_fails_the_rule_it_breaks(builder, rule):
    with pytest.raises(Failed, match="^" + re.escape(rule)):
        check_flat_batch_contract(builder)


def test_the_engine_names_the_rule_at_the_seam_not_a_token_mismatch():
    with pytest.raises(Failed, match="^" + re.escape(f"{POSITION_RULE}. chunk 0 (1 new after")):
        check_engine_outcome(ignores_num_computed, "chunked prefill")



def hands_the_batch_to(name: str) -> types.ModuleType:
    """A lesson module that imported minicb's builder as `name` and whose build_flat_batch only calls it."""
    module = types.ModuleType("exercises.lesson03_selective")
    setattr(module, name, build_flat_batch)
    exec(f"def build_flat_batch(chunks, block_size, device='cpu'):\n    return {name}(chunks, block_size, device)",
         vars(module))
    return module


@pytest.mark.parametrize("name", ["minicb_builder", "_build"])
def test_a_builder_that_calls_minicbs_under_another_name_is_refused(name, monkeypatch):
    with pytest.raises(AssertionError, match="must compute the fields itself, not call minicb's"):
        check_computes_every_field_itself(hands_the_batch_to(name), monkeypatch)
