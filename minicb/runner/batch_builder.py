"""build_flat_batch: a step's sequence chunks as one flat batch of T tokens (lesson 03's reference)."""
from __future__ import annotations

import torch

from minicb.attention.metadata import AttentionMetadata
from minicb.runner.batch import FlatBatch, SequenceChunk


def build_flat_batch(chunks: list[SequenceChunk], block_size: int,
                     device: torch.device | str = "cpu") -> FlatBatch:
    """One chunk per sequence, in batch order; a chunk's tokens are the last ones of its context."""
    if not chunks:
        raise ValueError("a batch needs at least one sequence chunk")
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    cu_seqlens = [0]
    seq_lens: list[int] = []
    logits_indices: list[int] = []
    for chunk in chunks:
        q_len, seq_len = len(chunk.token_ids), chunk.num_computed + len(chunk.token_ids)
        if not 0 < q_len <= seq_len:
            raise ValueError(f"a sequence needs 1..seq_len new tokens, got {q_len} of {seq_len}")
        if len(chunk.block_table) * block_size < seq_len:
            raise ValueError(f"block table of {len(chunk.block_table)} blocks cannot hold {seq_len} tokens")
        span = range(chunk.num_computed, seq_len)
        seq_lens.append(seq_len)
        input_ids += chunk.token_ids
        positions += span
        # Slot -1 skips the write, so padding never overwrites a real sequence's cache.
        slots += [chunk.block_table[p // block_size] * block_size + p % block_size if chunk.write_kv else -1
                  for p in span]
        cu_seqlens.append(len(input_ids))
        if chunk.needs_logits:
            logits_indices.append(len(input_ids) - 1)   # the chunk's last token predicts the next one
    width = max(len(c.block_table) for c in chunks)
    as_tensor = lambda xs, dtype: torch.tensor(xs, dtype=dtype, device=device)  # noqa: E731
    attn = AttentionMetadata(
        cu_seqlens_q=as_tensor(cu_seqlens, torch.int32),                                          # (B+1,)
        seq_lens=as_tensor(seq_lens, torch.int32),                                                # (B,)
        block_tables=as_tensor([c.block_table + [-1] * (width - len(c.block_table)) for c in chunks],
                               torch.int32),                                                      # (B, M)
        slot_mapping=as_tensor(slots, torch.int64),                                               # (T,)
        max_query_len=max(len(c.token_ids) for c in chunks), max_seq_len=max(seq_lens))
    return FlatBatch(as_tensor(input_ids, torch.int64), as_tensor(positions, torch.int64), attn,  # (T,), (T,)
                     as_tensor(logits_indices, torch.int64))                                      # (B',)
