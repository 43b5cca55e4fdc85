"""Eviction of cached blocks (lesson 10, task 2): what a policy sees of a block, and the default policy."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedBlock:
    """A cached block that no table holds."""
    block: int       # id in the KV pool: what the policy returns
    depth: int       # place in its prefix: 0 for a prompt's first block
    hits: int        # prefix hits that reused it since it was cached
    last_used: int   # pool's release count when it was last released: larger is more recent


def least_recently_used(candidates: Sequence[CachedBlock]) -> int:
    """Default (vLLM's): the block released longest ago. BlockManager keeps blocks in this order,
    so it applies this policy without building candidates."""
    return min(candidates, key=lambda c: c.last_used).block
