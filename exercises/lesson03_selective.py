"""Lesson 03: selective batching. Linear layers run on all T new tokens of all sequences at once;
attention needs to know which tokens belong together. The flat batch carries both.

Task 1  build_flat_batch   pytest tests/exercises -k lesson03_task1

The engine calls it every step (minicb/engine.py, via EngineParts); minicb's own is
build_flat_batch in minicb/batch.py.
"""
from __future__ import annotations

import torch

from minicb.attention.metadata import AttentionMetadata  # noqa: F401  (your batch's attn)
from minicb.batch import FlatBatch, SequenceChunk


def build_flat_batch(chunks: list[SequenceChunk], block_size: int, device: torch.device | str = "cpu") -> FlatBatch:
    """One FlatBatch from the step's chunks, one chunk per sequence (B of them), in order. Chunk i
    brings `token_ids` (its new tokens), `num_cached` (tokens already in the KV cache before them, so
    its first new token sits at position num_cached), `block_table`, `needs_logits` and `write_kv`.
    T is the total number of new tokens.

    - input_ids (T,) int64: every chunk's token_ids, concatenated in chunk order;
    - positions (T,) int64: num_cached, num_cached + 1, ... for each chunk's tokens;
    - attn = AttentionMetadata(...) with
      - cu_seqlens_q (B+1,) int32: [0, len0, len0 + len1, ...], chunk i's rows are cu[i]:cu[i+1];
      - seq_lens (B,) int32: num_cached + len(token_ids), the context after this step;
      - block_tables (B, M) int32: each block_table, padded with -1 to the longest (M blocks);
      - slot_mapping (T,) int64: token at position p of a sequence goes to
        block_table[p // block_size] * block_size + p % block_size; -1 for every token of a chunk
        whose write_kv is False (padding: computed, never stored);
      - max_seqlen_q, max_seq_len: plain ints, the longest chunk's len(token_ids) and the largest
        seq_len (kernels size their grids from them without reading the device);
    - logits_indices (B',) int64: the row of each chunk's last token, for the chunks with needs_logits.
    Every tensor is on `device`. Compute every field yourself: calling minicb's build_flat_batch (or
    FlatBatch.build, the same) fails the task.
    """
    raise NotImplementedError("Lesson 03, task 1: build_flat_batch: the flat batch the model runs on. "
                              "Check it with: pytest tests/exercises -k lesson03_task1")
