"""Lesson 03: selective batching. Linear layers run on all T new tokens of all sequences at once;
attention needs to know which tokens belong together. The flat batch carries both.

Task 1  build_flat_batch   pytest tests/exercises -k lesson03_task1

The engine calls it every step (minicb/engine.py, via EngineParts); minicb's own is
build_flat_batch in minicb/runner/batch_builder.py (the types are in minicb/runner/batch.py).
"""
from __future__ import annotations

import torch

from minicb.attention.metadata import AttentionMetadata  # noqa: F401  (your batch's attn)
from minicb.runner.batch import FlatBatch, SequenceChunk


def build_flat_batch(chunks: list[SequenceChunk], block_size: int, device: torch.device | str = "cpu") -> FlatBatch:
    """The step's work as the tensors the model runs on: linear layers run on all T rows at once (one
    row per new token of every chunk), and attention learns from `attn` which rows belong to which
    sequence and where their K/V live in the cache.

    What it may read: the chunks and block_size alone. The chunks are the step's B sequences, in order;
    chunk i brings its sequence's new tokens (`token_ids`, the last len(token_ids) tokens of its context),
    how many tokens of it the KV cache holds already (`num_computed`), its cache blocks in order
    (`block_table`, each block_size positions long; it may list more blocks than the context fills),
    whether a next token is sampled after the chunk (`needs_logits`), and whether its K/V are kept
    (`write_kv`: False for padding, rows computed and thrown away).

    The contract, which the tests check field by field on random steps:
    - input_ids (T,): the chunks' tokens, chunk i's in rows cu_seqlens_q[i] : cu_seqlens_q[i + 1],
      chunk after chunk; cu_seqlens_q (B + 1,) starts at 0;
    - positions (T,): each row's position in its own sequence, counting from the sequence's first
      token (the rotary embedding reads it);
    - seq_lens (B,): the context attention reads for each sequence, this step's tokens included;
    - slot_mapping (T,): where each row's K/V is written, as a row of the cache viewed as
      (num_blocks * block_size) slots: the slot that holds that position in the sequence's blocks. -1
      for every row of a chunk whose write_kv is False: padding must never overwrite a cache slot;
    - block_tables (B, M): row i is chunk i's block_table, the shorter ones padded with -1;
    - logits_indices (B',): for each chunk with needs_logits, in chunk order, the row whose hidden
      state predicts its sequence's next token (chunks without needs_logits have none);
    - max_query_len, max_seq_len: plain ints, the most rows of one chunk and the longest seq_len
      (kernels size their grids from them without reading the device).
    dtypes: int64 for input_ids, positions, slot_mapping and logits_indices; int32 for cu_seqlens_q,
    seq_lens and block_tables; every tensor on `device`. Compute every field yourself: calling minicb's
    build_flat_batch fails the task.
    """
    raise NotImplementedError("Lesson 03, task 1: build_flat_batch: the flat batch the model runs on. "
                              "Check it with: pytest tests/exercises -k lesson03_task1")
