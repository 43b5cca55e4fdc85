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

Which cached block goes when the pool runs short is minicb/kv/eviction.py's.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence


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
