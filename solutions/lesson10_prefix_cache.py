"""Lesson 10, a reference answer: minicb's own block_hashes and longest_cached_prefix, which the scheduler
runs by default with enable_prefix_caching, and an eviction policy that keeps what is reused without
keeping it forever. Least recently used treats a cold prologue, seen once, like a hot one seen a moment
before it. Fewest hits first tells those apart, but a prologue that was hot keeps its count after its traffic
has gone, and holds the pool against the prologues that are hot now. So the split is only whether an
admission has reused a block: those none has go first, and within each group recency decides, as two-queue
caches (2Q, segmented LRU) do."""
from __future__ import annotations

from collections.abc import Sequence

from minicb.kv.eviction import CachedBlock
from minicb.kv.prefix_cache import block_hashes, longest_cached_prefix

__all__ = ["block_hashes", "choose_eviction", "longest_cached_prefix"]


def choose_eviction(candidates: Sequence[CachedBlock]) -> int:
    return min(candidates, key=lambda c: (c.hits > 0, c.last_used)).block
