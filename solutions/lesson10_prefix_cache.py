"""Lesson 10, a reference answer: minicb's own block_hashes and longest_cached_prefix, which the scheduler
runs by default with enable_prefix_caching, and an eviction policy that keeps what is reused. Least
recently used treats a cold prologue, seen once, like a hot one seen a moment before it; counting hits
tells them apart, so the blocks no admission has reused go first. Among equals the deepest goes first (a
chain's tail before its head, which every hit needs), then the least recently used."""
from __future__ import annotations

from collections.abc import Sequence

from minicb.prefix_cache import CachedBlock, block_hashes, longest_cached_prefix

__all__ = ["block_hashes", "choose_eviction", "longest_cached_prefix"]


def choose_eviction(candidates: Sequence[CachedBlock]) -> int:
    return min(candidates, key=lambda c: (c.hits, -c.depth, c.last_used)).block
