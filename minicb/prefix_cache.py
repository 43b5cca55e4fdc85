"""Prefix caching: a block's identity is the whole prefix it ends, as one chained hash.

Requests often share a beginning (a system prompt, a few-shot preamble, a conversation so far). Its
K/V is the same for all of them, because a token's K/V depends only on the tokens up to it. So a
block full of computed tokens is kept, under a name for the prefix that ends with it, and a request
whose prompt starts the same way reuses it instead of prefilling it again (vLLM's
enable_prefix_caching). Only full blocks are named: a partial block is still being written.

The name chains: block k's hash covers block k-1's hash and block k's own token ids, so two equal
hashes mean two equal prefixes, all of it and not only the last block. sha256 makes a collision (two
different prefixes with one hash, whose K/V would be mixed up) negligible: about 2**-128 for any
pair even among billions of blocks.
"""
from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def block_hashes(token_ids: Sequence[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """The chain hash of every FULL block of token_ids, in order: len(token_ids) // block_size hashes
    (a partial last block has none). Block k's hash is the sha256 digest (32 bytes) of the previous
    block's hash (`parent` for the first block; nothing when parent is None) followed by block k's
    block_size token ids, each as 4 bytes, unsigned, little-endian."""
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start:start + block_size]
        parent = hashlib.sha256((parent or b"") + struct.pack(f"<{block_size}I", *block)).digest()
        hashes.append(parent)
    return hashes


def longest_cached_prefix(hashes: Sequence[bytes], cached: Mapping[bytes, int]) -> int:
    """How many of the leading hashes are in `cached` (hash -> block): the count before the first
    one that is missing. A later hash present after a missing one does not count: a cached block is of
    no use without every block before it."""
    for n, block_hash in enumerate(hashes):
        if block_hash not in cached:
            return n
    return len(hashes)


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
