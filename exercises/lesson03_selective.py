"""Lesson 03: selective batching. Linear layers run on all T new tokens of all sequences at once;
attention needs to know which tokens belong together. The flat batch carries both.

Task 1  build_flat_batch   pytest tests/exercises -k lesson03_task1

The engine calls it every step (minicb/engine.py, via EngineParts); minicb's own is FlatBatch.build
in minicb/batch.py.
"""
from __future__ import annotations

import torch

from minicb.batch import FlatBatch, SequenceChunk


def build_flat_batch(chunks: list[SequenceChunk], block_size: int, device: torch.device | str = "cpu") -> FlatBatch:
    """One FlatBatch from the step's chunks, one chunk per sequence, in order. Chunk i brings
    `token_ids` (its new tokens), `num_cached` (tokens already in the KV cache before them), its
    `block_table`, `needs_logits` and `write_kv`.

    - input_ids (T,) int64: every chunk's token_ids, concatenated;
    - positions (T,) int64: num_cached, num_cached + 1, ... for each chunk's tokens;
    - attn = AttentionMetadata(cu_seqlens_q (B+1,) int32 [0, len0, len0+len1, ...],
      seq_lens (B,) int32 num_cached + len(token_ids), block_tables (B, M) int32 padded with -1,
      slot_mapping (T,) int64: block_table[pos // block_size] * block_size + pos % block_size, or -1
      for every token of a chunk with write_kv False, max_seqlen_q, max_seq_len);
    - logits_indices (B',) int64: the row of each chunk's last token, for chunks with needs_logits.
    All tensors on `device`.
    """
    raise NotImplementedError("Lesson 03, task 1: build_flat_batch: the flat batch the model runs on. "
                              "Check it with: pytest tests/exercises -k lesson03_task1")
