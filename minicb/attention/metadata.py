"""AttentionMetadata: how a flat batch of T tokens from B sequences maps onto the paged KV cache.

This is the one contract between whoever builds a batch (the scheduler's side) and whoever runs
attention (the torch loop, the vectorised torch path, or a Triton kernel). Nothing in it knows
about requests, only about sequences, positions and cache slots.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    cu_seqlens_q: torch.Tensor   # (B+1,) int32: sequence i's new tokens are rows cu[i]:cu[i+1] of the batch
    seq_lens: torch.Tensor       # (B,) int32: context length after this step (cached prefix + new tokens)
    block_tables: torch.Tensor   # (B, M) int32: block ids holding each sequence's context, -1 past the end
    slot_mapping: torch.Tensor   # (T,) int64: where each new token's K/V goes (block * block_size + offset); -1 skips
    max_seqlen_q: int            # longest run of new tokens, so kernels can size their grids without a sync
    max_seq_len: int
    derived: dict = field(default_factory=dict, repr=False, compare=False)  # per-step layouts a backend caches

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @classmethod
    def build(cls, query_lens: list[int], seq_lens: list[int], block_tables: list[list[int]],
              block_size: int, device: torch.device | str = "cpu",
              write_kv: list[bool] | None = None) -> "AttentionMetadata":
        """Derive every field from plain lists: each sequence's new-token count, its context length
        after this step, and its block table. The new tokens are always the last ones of the context."""
        if not (len(query_lens) == len(seq_lens) == len(block_tables)):
            raise ValueError("query_lens, seq_lens and block_tables need one entry per sequence")
        slots: list[int] = []
        for i, (q_len, s_len, table) in enumerate(zip(query_lens, seq_lens, block_tables)):
            if not 0 < q_len <= s_len:
                raise ValueError(f"a sequence needs 1..seq_len new tokens, got {q_len} of {s_len}")
            if len(table) * block_size < s_len:
                raise ValueError(f"block table of {len(table)} blocks cannot hold {s_len} tokens")
            if write_kv is not None and not write_kv[i]:
                slots.extend([-1] * q_len)
                continue
            for pos in range(s_len - q_len, s_len):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
        width = max(len(t) for t in block_tables)
        padded = [t + [-1] * (width - len(t)) for t in block_tables]
        cu = [0]
        for q_len in query_lens:
            cu.append(cu[-1] + q_len)
        as_tensor = lambda xs, dtype: torch.tensor(xs, dtype=dtype, device=device)  # noqa: E731
        return cls(cu_seqlens_q=as_tensor(cu, torch.int32), seq_lens=as_tensor(seq_lens, torch.int32),
                   block_tables=as_tensor(padded, torch.int32), slot_mapping=as_tensor(slots, torch.int64),
                   max_seqlen_q=max(query_lens), max_seq_len=max(seq_lens))
