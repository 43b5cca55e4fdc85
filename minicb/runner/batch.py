"""SequenceChunk and FlatBatch: one step's work and the tensors the model runs on (lesson 03).
minicb/runner/batch_builder.py turns chunks into a FlatBatch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minicb.attention.metadata import AttentionMetadata
from minicb.scheduler.output import SchedulerOutput


PAD_TOKEN = 0   # any id will do: padding rows are computed and thrown away


@dataclass
class SequenceChunk:
    token_ids: list[int]     # the new tokens this step
    num_computed: int        # tokens already cached before them (= their first position)
    block_table: list[int]   # the sequence's blocks; must cover num_computed + len(token_ids)
    needs_logits: bool = True  # False for a prefill chunk that is not the prompt's last
    write_kv: bool = True      # False for padding: computed, never stored


@dataclass
class FlatBatch:
    input_ids: torch.Tensor       # (T,) int64
    positions: torch.Tensor       # (T,) int64
    attn: AttentionMetadata
    logits_indices: torch.Tensor  # (B',) rows of T whose hidden state predicts a next token

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]


def sequence_chunks(out: SchedulerOutput) -> list[SequenceChunk]:
    """Chunks from the scheduler's snapshots only; the dense baseline's padding rows come last."""
    chunks = [SequenceChunk(list(c.token_ids), c.num_computed, list(c.block_table), c.needs_logits)
              for c in out.chunks]
    for pad in out.padding:
        chunks.append(SequenceChunk([PAD_TOKEN] * pad.num_tokens, pad.num_computed, list(pad.block_table),
                                    needs_logits=False, write_kv=False))
    return chunks
