"""AttentionMetadata: how a flat batch of T tokens from B sequences maps onto the paged KV cache.

This is the one contract between whoever builds a batch (the scheduler's side) and whoever runs
attention (the torch loop, the vectorised torch path, or a Triton kernel). Nothing in it knows
about requests, only about sequences, positions and cache slots. minicb.runner.batch_builder.build_flat_batch fills it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    cu_seqlens_q: torch.Tensor   # (B+1,) int32: sequence i's new tokens are rows cu[i]:cu[i+1] of the batch
    seq_lens: torch.Tensor       # (B,) int32: context length after this step (computed prefix + new tokens)
    block_tables: torch.Tensor   # (B, M) int32: block ids holding each sequence's context, -1 past the end
    slot_mapping: torch.Tensor   # (T,) int64: where each new token's K/V goes (block * block_size + offset); -1 skips
    max_query_len: int           # longest run of new tokens, so kernels can size their grids without a sync
    max_seq_len: int
    derived: dict = field(default_factory=dict, repr=False, compare=False)  # per-step layouts a backend caches

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]
