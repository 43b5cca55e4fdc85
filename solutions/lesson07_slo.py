"""Lesson 07, a reference answer. Chunked prefill with a small token budget keeps every step short,
so a long document cannot stall the decodes (p99 ITL); more seats serve the burst; and a bounded
queue turns a few requests away at once instead of letting every queue wait grow (p99 TTFT). Each is
set with room to spare on every target, not at the edge of the lesson's one workload: the budget a little
above what ITL needs, for throughput, and the queue long enough that a burstier workload is not
mostly turned away."""
from __future__ import annotations

from minicb.scheduler.chunking import chunk_size

__all__ = ["chunk_size", "slo_config"]


def slo_config() -> dict:
    return dict(enable_chunked_prefill=True, max_num_batched_tokens=144, max_num_seqs=96, max_waiting=24)
