"""Lesson 07, a reference answer. Chunked prefill with a small token budget keeps every step short,
so a long document cannot stall the decodes (p99 ITL); more seats serve the burst; and a bounded
queue turns a few requests away at once instead of letting every queue wait grow (p99 TTFT)."""
from __future__ import annotations

from minicb.scheduler.chunking import chunk_size

__all__ = ["chunk_size", "slo_config"]


def slo_config() -> dict:
    return dict(enable_chunked_prefill=True, max_num_batched_tokens=128, max_num_seqs=64, max_waiting=16)
