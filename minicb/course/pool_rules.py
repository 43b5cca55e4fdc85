"""The KV pool's rules in a learner's words (lessons 04 and 10): each broken rule named, with what happened
to which block and what usually causes it. The engine's own check (EngineConfig.check_kv_invariants) checks
the same ledger tersely; the graders and lesson 04's cells run this one."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

from minicb.engine import LLMEngine
from minicb.kv.block_manager import BlockManager
from minicb.kv.prefix_cache import block_hashes


def holders_of(seq_ids: list[str]) -> str:
    """'a', or 'a' and 'b', or 'a', 'b' and 'c': the sequences holding a block, for a message."""
    names = [repr(seq_id) for seq_id in seq_ids]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def check_pool(bm: BlockManager, naming: Callable[..., list[bytes]] = block_hashes) -> None:
    """Every rule the pool keeps, checked on the allocator's state. Raises AssertionError naming
    the first broken rule, what happened to which block, and what usually causes it.

    The ledger's rule, from lesson 04 on: a device block is in exactly one place, the free list,
    the prefix cache's LRU (evictable), or the tables of the sequences holding it, and its ref
    count is the number of those sequences (more than one only for a cached prefix, lesson 10)."""
    tables, swapped, num_tokens = bm.tables, bm.swapped, bm.num_tokens
    holders: dict[int, list[str]] = {}
    for seq_id, table in tables.items():
        for block in table:
            holders.setdefault(block, []).append(seq_id)
    free = Counter(bm.free_blocks)
    strays = sorted(b for b in holders.keys() | free.keys() | set(bm.evictable)
                    if not 0 <= b < bm.num_blocks)
    assert not strays, f"block ids {strays} are not in the pool of {bm.num_blocks}"
    assert len(bm.ref_counts) == bm.num_blocks, (
        f"ref_counts needs one entry per block ({bm.num_blocks})")
    twice = sorted(block for block, n in free.items() if n > 1)
    assert not twice, (f"block {twice[0]} returned twice: it is on the free list {free[twice[0]]} times; "
                       "a block goes back once, when its ref count reaches 0")
    for where, blocks in (("on the free list", free), ("in the prefix cache's LRU", bm.evictable)):
        early = sorted(block for block in blocks if block in holders)
        assert not early, (
            f"block {early[0]} returned twice: it is {where} while {holders_of(holders[early[0]])} still "
            f"{'holds' if len(holders[early[0]]) == 1 else 'hold'} it (ref count "
            f"{bm.ref_counts[early[0]]}); free gives a block back only when its ref count "
            "reaches 0, that is when no sequence holds it any more")
    for block, seqs in sorted(holders.items()):
        count = bm.ref_counts[block]
        assert count == len(seqs), (
            f"block {block}: ref count {count}, but {len(seqs)} sequence(s) hold it "
            f"({holders_of(seqs)}): its ref count is the number of sequences holding it; "
            "taking it adds 1, each holder's free subtracts 1")
    shared = sorted(block for block, seqs in holders.items()
                    if len(seqs) > 1 and block not in bm.block_hash)
    assert not shared, (f"block {shared[0]} is in two tables at once "
                        f"({holders_of(holders[shared[0]])}) but is no cached prefix: "
                        "a block taken must leave the free list, and only a cached block is shared")
    unheld = sorted(block for block in free.keys() | set(bm.evictable) if bm.ref_counts[block] != 0)
    assert not unheld, (f"block {unheld[0]} is free with ref count {bm.ref_counts[unheld[0]]}: "
                        "a block no sequence holds has ref count 0")
    lost = sorted(set(range(bm.num_blocks)) - holders.keys() - free.keys() - set(bm.evictable))
    assert not lost, (f"blocks lost: {len(lost)} of {bm.num_blocks} are neither free nor held "
                      f"(block {lost[0]}, ref count {bm.ref_counts[lost[0]]}): " + (
                          "free puts a block back on the free list when its ref count reaches 0"
                          if bm.ref_counts[lost[0]] == 0 else
                          "no table lists it, yet its ref count says a sequence holds it: a block leaves "
                          "a table only when its holder frees it, subtracting 1"))
    uncounted = sorted(tables.keys() - num_tokens.keys())
    assert not uncounted, (
        f"{uncounted[0]!r} has a table but no token count: allocate records num_tokens[seq_id]")
    uncounted = sorted(swapped.keys() - num_tokens.keys())
    assert not uncounted, (f"{uncounted[0]!r} is still in swapped but has no token count: does free "
                           "give a swapped sequence's CPU blocks back and forget it in swapped?")
    orphans = sorted(num_tokens.keys() - tables.keys() - swapped.keys())
    assert not orphans, (
        f"{orphans[0]!r} still has a token count but no blocks: free must forget it everywhere")
    for seq_id, table in tables.items():
        assert len(table) * bm.block_size >= num_tokens[seq_id], (
            f"{seq_id!r}'s table has {len(table) * bm.block_size} slots for {num_tokens[seq_id]} "
            "tokens: a sequence needs a new block whenever its last one is full")
    both = sorted(swapped.keys() & tables.keys())
    assert not both, f"{both} are on the device and swapped at once"
    swap_held = Counter(block for blocks in swapped.values() for block in blocks)
    swap_free = Counter(bm.free_swap_blocks)
    twice = sorted(b for b, n in (swap_held + swap_free).items() if n > 1)
    assert not twice, f"swap blocks {twice} are held twice, or held and free at once"
    lost = bm.num_swap_blocks - len(swap_held) - len(swap_free)
    assert lost == 0, (f"swap blocks lost: {lost} of {bm.num_swap_blocks} are neither free nor held "
                       "— does free give a swapped sequence's CPU blocks back?")
    for seq_id, blocks in swapped.items():
        assert len(blocks) * bm.block_size >= num_tokens[seq_id], (
            f"{seq_id!r}'s swap copy is too short")
    _check_prefix_cache(bm, free.keys(), naming)


def _check_prefix_cache(bm: BlockManager, free: set[int], naming: Callable[..., list[bytes]]) -> None:
    """Prefix caching's rules (check_invariants has checked that every block is in one place: free
    list, LRU, or tables): names map both ways, and each name is the one the engine's naming gives the
    tokens the block was cached with, after its parent's name."""
    evictable = set(bm.evictable)
    both = sorted(evictable & free)
    assert not both, f"blocks {both} are evictable and also free: one place per block"
    named = sorted(block for block in free if block in bm.block_hash)
    assert not named, f"blocks {named} are on the free list with a prefix hash: eviction must drop it"
    unnamed = sorted(evictable - bm.block_hash.keys())
    assert not unnamed, f"blocks {unnamed} are evictable but cached under no hash"
    assert bm.block_stats.keys() == bm.block_hash.keys(), "block_stats and block_hash disagree"
    assert len(bm.cached) == len(bm.block_hash) and all(
        bm.block_hash.get(block) == h
        for h, block in bm.cached.items()), "cached and block_hash disagree"
    for block, h in bm.block_hash.items():
        parent, token_ids = bm.block_origin[block]
        assert naming(token_ids, bm.block_size, parent) == [h], (
            f"block {block}'s prefix hash is not the name block_hashes gives "
            "the tokens it was cached with")


def check_cached_content(bm: BlockManager, seq_id: str, token_ids: list[int], names: list[bytes]) -> None:
    """Every cached block in seq_id's table was cached for the prefix the sequence has there: the same
    tokens in the block, after the same names (`names`, the sequence's own block names). Block by block
    from the start, that is the whole prefix, whatever the naming: a block whose slots were overwritten
    under its old name fails, and so does a name that two different prefixes share (a hit would read
    another prompt's K/V)."""
    size = bm.block_size
    for i, block in enumerate(bm.tables.get(seq_id, [])[:len(names)]):
        if block in bm.block_origin:
            parent, cached_ids = bm.block_origin[block]
            assert cached_ids == token_ids[i * size:(i + 1) * size], (
                f"{seq_id!r}'s block {i} (block {block}) is cached under other tokens than "
                "the sequence's")
            assert parent == (names[i - 1] if i else None) and bm.block_hash[block] == names[i], (
                f"{seq_id!r}'s block {i} (block {block}) was cached after another prefix than "
                "the sequence's, under the same name: block_hashes gave two different prefixes one name")


def check_engine_pool(engine: LLMEngine) -> None:
    """check_pool on an engine's pool, under the names its parts give, and each request's cached blocks
    checked against the request's own prefix."""
    kv = engine.scheduler.kv
    check_pool(kv, engine.parts.block_hashes)
    for req in engine.scheduler.holding_kv():
        check_cached_content(kv, req.request_id, req.all_token_ids, req.block_hashes)


def explaining(engine: LLMEngine) -> LLMEngine:
    """engine, whose check after every step (check_kv_invariants=True) is check_engine_pool: a broken rule
    comes with what usually causes it."""
    if engine.config.check_kv_invariants:
        engine.scheduler.kv.check_invariants = functools.partial(check_engine_pool, engine)
    return engine
