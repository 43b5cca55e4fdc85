"""FlatBatch: the scheduler's decision for one step, as the tensors the model runs on.

Every sequence contributes a chunk of new tokens: a whole prompt (prefill), part of one (chunked
prefill), or one token (decode). The chunks are concatenated into one flat batch of T tokens;
nothing is padded, except by the dense baseline, whose padding rows are computed on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minicb.attention.metadata import AttentionMetadata
from minicb.scheduler.output import SchedulerOutput


PAD_TOKEN = 0   # any id will do: padding rows are computed and thrown away


@dataclass
class SequenceChunk:
    token_ids: list[int]     # the new tokens this step
    num_cached: int          # tokens already in the KV cache before them (their first position)
    block_table: list[int]   # the sequence's blocks; must cover num_cached + len(token_ids)
    needs_logits: bool = True  # False for a prefill chunk that is not the prompt's last
    write_kv: bool = True      # False for padding: computed, never stored


@dataclass
class FlatBatch:
    input_ids: torch.Tensor       # (T,) int64
    positions: torch.Tensor       # (T,) int64
    attn: AttentionMetadata
    logits_indices: torch.Tensor  # (B',) rows of the T whose hidden state becomes a next token

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]

    @classmethod
    def build(cls, chunks: list[SequenceChunk], block_size: int,
              device: torch.device | str = "cpu") -> "FlatBatch":
        if not chunks:
            raise ValueError("a batch needs at least one sequence chunk")
        input_ids: list[int] = []
        positions: list[int] = []
        logits_indices: list[int] = []
        for chunk in chunks:
            input_ids.extend(chunk.token_ids)
            positions.extend(range(chunk.num_cached, chunk.num_cached + len(chunk.token_ids)))
            if chunk.needs_logits:
                logits_indices.append(len(input_ids) - 1)
        attn = AttentionMetadata.build(
            query_lens=[len(c.token_ids) for c in chunks],
            seq_lens=[c.num_cached + len(c.token_ids) for c in chunks],
            block_tables=[c.block_table for c in chunks], block_size=block_size, device=device,
            write_kv=[c.write_kv for c in chunks])
        as_long = lambda xs: torch.tensor(xs, dtype=torch.int64, device=device)  # noqa: E731
        return cls(as_long(input_ids), as_long(positions), attn, as_long(logits_indices))


def sequence_chunks(out: SchedulerOutput) -> list[SequenceChunk]:
    """The scheduler's decision as chunks: each scheduled request brings its next num_new_tokens
    uncomputed tokens; the dense baseline's padding rows come last."""
    block_tables = out.block_tables
    chunks = []
    for c in out.chunks:
        req = c.request
        start = req.num_computed_tokens
        chunks.append(SequenceChunk(req.all_token_ids[start:start + c.num_new_tokens], start,
                                    block_tables[req.request_id], c.completes_known_tokens))
    for pad in out.padding:
        chunks.append(SequenceChunk([PAD_TOKEN] * pad.num_tokens, pad.num_cached, block_tables[pad.request.request_id],
                                    needs_logits=False, write_kv=False))
    return chunks


build_flat_batch = FlatBatch.build
