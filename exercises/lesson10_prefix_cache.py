"""Lesson 10: prefix caching. Requests often begin alike (a system prompt, a few-shot preamble, a
conversation so far), and a token's K/V depends only on the tokens up to it, so a block full of computed
tokens can be kept under a name for the whole prefix it ends; a request whose prompt begins the same way
reuses it instead of prefilling it again (vLLM's enable_prefix_caching). Your functions name the blocks,
find how much of a prompt the cache already holds, and choose which cached block to give up when the
pool runs short.

Task 1  block_hashes, longest_cached_prefix   pytest tests/exercises -k lesson10_task1
Task 2  choose_eviction (a design task)       pytest tests/exercises -k lesson10_task2

With enable_prefix_caching=True the scheduler calls the first two (minicb's own are in
minicb/kv/prefix_cache.py; `course.llm(lesson=10, enable_prefix_caching=True)` plugs yours in). It names a
request's blocks as they fill, a few at a time, and looks a waiting request's names up before admitting
it: a hit counts as computed, and only the rest of the prompt is prefilled. Task 2 is a design task:
the block manager asks your policy whenever it must evict (EngineParts(choose_eviction=...); minicb's
default is least recently used), and it is graded on its hit rate, not on how it decides.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from minicb.kv.eviction import CachedBlock


def block_hashes(token_ids: Sequence[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """The name of every full block of token_ids, in order: the engine keeps a computed block under it,
    and a later prompt finds the block by computing the same name.

    A name stands for the whole prefix a block ends, not for the block alone: a cached block's K/V is
    right only for a request whose every earlier token is the same. `parent` is the name of the block
    just before token_ids[0] (None: token_ids starts the prompt), because the engine names a request's
    blocks in pieces, as they fill. Reads only its arguments.

    The contract (each rule is checked by a test):
    1. One name per full block of block_size ids, in order; a partial last block is still being written
       and has none.
    2. Equal names if and only if equal prefixes: two blocks get one name exactly when their own ids
       are equal and so are their parents (the whole chain of blocks before them, and the same
       `parent`). Equal blocks after different prefixes, or at different places, get different names.
    3. Naming in pieces gives what naming in one go gives: for a prefix `a` of whole blocks,
       block_hashes(a + b, n) == block_hashes(a, n) + block_hashes(b, n, parent=block_hashes(a, n)[-1]).
    4. A name is bytes, of one length for every block (the pool keeps one per cached block, however long
       its prefix), at least 16 bytes. Rule 2 must hold for any ids below 2**32, against a user who
       chooses them: a prompt crafted to share a name with another user's prefix would read that user's
       K/V. vLLM had that bug (advisory GHSA-rm76-4mrf-v9r8), and so did Megatron-LM (PR #4158).
    How a name is made is yours to decide. The tests try ids chosen to make names collide.
    """
    raise NotImplementedError("Lesson 10, task 1: block_hashes: the chain hash of each full block. "
                              "Check it with: pytest tests/exercises -k lesson10_task1")


def longest_cached_prefix(hashes: Sequence[bytes], cached: Mapping[bytes, int]) -> int:
    """How many of a prompt's blocks the prefix cache can give it: the scheduler counts that many
    blocks' tokens as computed and starts the request's table with their cached blocks.

    `hashes` are the prompt's block names in order (block_hashes); `cached` maps the name of each block
    the pool holds to its block id. Reads them; changes neither (`cached` is the pool's own map).

    The contract (each rule is checked by a test): the result n is an int, 0 <= n <= len(hashes), with
    1. every one of hashes[:n] in `cached` (a hit is usable only block by block from the start: a cached
       block is no use without every block before it), and
    2. n as large as that allows: n == len(hashes), or hashes[n] is not in `cached`.
    3. Presence is membership: a name is cached exactly when it is a key of `cached`, whatever block id
       it maps to.
    """
    raise NotImplementedError("Lesson 10, task 1: longest_cached_prefix: how many leading blocks the cache holds. "
                              "Check it with: pytest tests/exercises -k lesson10_task1")


def choose_eviction(candidates: Sequence[CachedBlock]) -> int:
    """Which cached block the pool gives up next, when an allocation needs a block and the free list
    is empty: the block loses its name, and a later prompt that needed it prefills it again.

    `candidates` are the cached blocks no request holds (at least one), least recently used first:
    each CachedBlock says its `block` id, its `depth` in its prefix (0: a prompt's first block), its
    `hits` (how many admissions have reused it since it was cached) and `last_used` (a clock of block
    releases: larger is more recent). They are all you may read. A chain's blocks only help from the
    start (longest_cached_prefix): a block whose parent is gone is no use to anyone.

    The contract: return the `block` of one of the candidates (an int; not its index, not the
    CachedBlock). The pool does the rest (the name, the free list), and minicb's least recently used
    is the default you must beat.

    The outcome (graded on workloads it has not seen): requests whose prompts begin with one of a few
    hot prologues, used again and again, or with a cold one, used once, in a pool too small to keep
    everything. In half the workloads the hot prologues stay hot; in the other half they change halfway
    through (minicb.lab.workload.hot_and_cold_prompts(seed, phases=2)), and what was hot is not asked for
    again. Your policy's prefix-cache hit rate must beat least recently used's by at least 3 percentage
    points on every workload, with every request's tokens unchanged.
    """
    raise NotImplementedError("Lesson 10, task 2: choose_eviction: which cached block to evict next. "
                              "Check it with: pytest tests/exercises -k lesson10_task2")
