"""Evicting cached blocks (lesson 10, task 2): what an eviction policy may know of a cached block no table
holds, minicb's default policy, and the prompts a policy is measured on.

With prefix caching, a block full of computed tokens keeps its K/V after its last holder frees it, in case a
later prompt begins the same way (minicb/kv/prefix_cache.py names it). When allocation runs short, one such
block loses its name and is handed out again: the policy chooses which, the block manager does the rest.
"""
from __future__ import annotations

import random
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


def hot_and_cold_prompts(seed: int, num_requests: int = 200, num_hot: int = 3, prologue_tokens: int = 16,
                         hot_share: float = 0.5, vocab_size: int = 2000, phases: int = 1) -> list[list[int]]:
    """Token-id prompts that an eviction policy is measured on (lesson 10, task 2): each begins with one
    of num_hot hot prologues (with probability hot_share), used again and again, or with a cold one of
    its own, used once, and ends in a tail of 1 to 6 tokens of its own. With phases > 1 the requests come
    in that many equal parts, each with hot prologues of its own: what was hot goes cold, as traffic does
    when a new system prompt ships."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab_size) for _ in range(n)]

    prompts = []
    for phase in range(phases):
        hot = [tokens(prologue_tokens) for _ in range(num_hot)]
        part = num_requests // phases + (phase < num_requests % phases)
        prompts += [(rng.choice(hot) if rng.random() < hot_share else tokens(prologue_tokens))
                    + tokens(rng.randrange(1, 7)) for _ in range(part)]
    return prompts
