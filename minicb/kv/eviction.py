"""Evicting cached blocks (lesson 10, task 2): what an eviction policy may know of a cached block no table
holds, and minicb's default policy.

With prefix caching, a block full of computed tokens keeps its K/V after its last holder frees it, in case a
later prompt begins the same way (minicb/kv/prefix_cache.py names it). When allocation runs short, one such
block loses its name and is handed out again: the policy chooses which, the block manager does the rest.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedBlock:
    """What an eviction policy may know of a cached block that no table holds (lesson 10, task 2)."""
    block: int       # its id in the KV pool: what the policy returns
    depth: int       # its place in its prefix: 0 for a prompt's first block, 1 for the one after it, ...
    hits: int        # how many times a prefix hit has reused it since it was cached
    last_used: int   # the pool's count of released blocks when it was last released: larger is more recent


def least_recently_used(candidates: Sequence[CachedBlock]) -> int:
    """minicb's eviction policy (vLLM's): the cached block released longest ago goes first. The block
    manager keeps its candidates in that order, so it runs this without building them."""
    return min(candidates, key=lambda c: c.last_used).block
