"""Lesson 10: prefix caching. Requests often begin alike (a system prompt, a few-shot preamble, a
conversation so far), and a token's K/V depends only on the tokens up to it, so a block full of computed
tokens can be kept under a name for the whole prefix it ends; a request whose prompt begins the same way
reuses it instead of prefilling it again (vLLM's enable_prefix_caching). Your two functions name the
blocks and find how much of a prompt the cache already holds.

Task 1  block_hashes            pytest tests/exercises -k lesson10_task1
Task 2  longest_cached_prefix   pytest tests/exercises -k lesson10_task2

With enable_prefix_caching=True the scheduler calls both (minicb's own are in minicb/prefix_cache.py;
`course.llm(lesson=10, enable_prefix_caching=True)` plugs yours in): it hashes each block of a request
once, continuing the chain from the last hash it knows, and looks the hashes up before admitting the
request, so a hit counts as computed and only the rest of the prompt is prefilled.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def block_hashes(token_ids: Sequence[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """The chain hash of every full block of token_ids, in order.

    It chains so that two equal hashes mean two equal prefixes, the whole of them and not only their
    last blocks: a cached block's K/V is only right for a request whose every earlier token is the same.
    The engine hashes each block of a request once, as it fills, continuing from the last hash it knows
    (`parent`), so hashing in pieces must give what hashing in one go gives.

    Rules (each is checked by a test):
    1. Only FULL blocks have a hash: len(token_ids) // block_size of them, block k being
       token_ids[k * block_size:(k + 1) * block_size]. A partial last block (still being written) has
       none; fewer tokens than a block give [].
    2. The bytes: block k's hash is hashlib.sha256(previous + packed).digest(), 32 bytes (the digest, not
       its hex), where packed is block k's block_size token ids each packed as 4 bytes, unsigned,
       little-endian (struct format "<I", all of them: f"<{block_size}I"), and previous is block k-1's
       hash; for block 0 it is `parent`, or nothing at all (b"") when parent is None.
    3. The chain: block k's hash depends on every block before it. A change in block j changes the
       hashes of block j and of every block after it, and none before it; equal blocks at different
       places, or after different prefixes, hash differently.
    4. `parent` continues a chain: for a prefix `a` of whole blocks, block_hashes(a + b, n) ==
       block_hashes(a, n) + block_hashes(b, n, parent=block_hashes(a, n)[-1]).
    """
    raise NotImplementedError("Lesson 10, task 1: block_hashes: the chain hash of each full block. "
                              "Check it with: pytest tests/exercises -k lesson10_task1")


def longest_cached_prefix(hashes: Sequence[bytes], cached: Mapping[bytes, int]) -> int:
    """How many of the leading blocks the prefix cache holds: `hashes` are a prompt's block hashes in
    order (block_hashes), `cached` maps the hash of each cached block to the block's id in the KV pool.

    Rules (each is checked by a test):
    1. The count of leading hashes that are in `cached`, stopping at the first one that is missing:
       hashes[:n] are all in cached, and hashes[n] is not (or n == len(hashes)).
    2. A hash present after a missing one does not count: a cached block is of no use without every
       block before it.
    3. Presence is membership (hash in cached): a block id is any int, 0 included.
    4. 0 when hashes is empty, or when its first hash is missing.
    5. `cached` is the pool's own map: read it, never change it.
    """
    raise NotImplementedError("Lesson 10, task 2: longest_cached_prefix: how many leading blocks the cache holds. "
                              "Check it with: pytest tests/exercises -k lesson10_task2")
