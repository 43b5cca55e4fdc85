"""Prefix caching (lesson 10): chained block hashes and the longest cached prefix.
Eviction is in minicb/kv/eviction.py."""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence


def block_hashes(token_ids: Sequence[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """One 32-byte hash per FULL block, in order (a partial last block gets none).
    Block k's hash is sha256(prev + ids).digest(): prev is block k-1's hash (block 0: `parent`, or no
    bytes if None); ids are block k's block_size token ids, each 4 bytes, unsigned, little-endian."""
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start:start + block_size]
        parent = hashlib.sha256((parent or b"") + struct.pack(f"<{block_size}I", *block)).digest()
        hashes.append(parent)
    return hashes


def longest_cached_prefix(hashes: Sequence[bytes], cached: Mapping[bytes, int]) -> int:
    """Count of leading hashes in `cached` (hash -> block), up to the first miss.
    Hits after a miss do not count: a cached block is no use without every block before it."""
    for n, block_hash in enumerate(hashes):
        if block_hash not in cached:
            return n
    return len(hashes)
