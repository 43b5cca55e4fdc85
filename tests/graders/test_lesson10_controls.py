"""Negative controls for lesson 10's graders: plausible mistakes, each written as a learner would make it
(minicb's reference, or the lesson's, with one thing broken), must fail the check of the rule they break,
with that rule named; the reference passes every check."""
from __future__ import annotations

import hashlib
import struct

import pytest
from _pytest.outcomes import Failed

from test_lesson10_prefix_cache import (
    check_block_zero, check_chosen_ids, check_engine, check_equal_names_iff_equal_prefixes, check_eviction_beats_lru,
    check_eviction_contract, check_full_blocks_only, check_lookup, check_pieces, check_read_only,
    check_the_parent_counts)

from minicb import course
from minicb.kv.eviction import least_recently_used
from minicb.kv.prefix_cache import block_hashes, longest_cached_prefix
from minicb.parts import EngineParts

reference_eviction = course.lesson("lesson10_prefix_cache", "solutions").choose_eviction


# --- task 1, block_hashes ---------------------------------------------------------------------------------

def names_each_block_alone(token_ids, block_size, parent=None):
    """Names a block by its own ids: equal blocks after different prefixes collide."""
    return [block_hashes(token_ids[k:k + block_size], block_size)[0]
            for k in range(0, len(token_ids) - block_size + 1, block_size)]


def ignores_order_within_a_block(token_ids, block_size, parent=None):
    """Sorts each block's ids before naming it: [1, 0] and [0, 1] get one name."""
    whole = len(token_ids) // block_size * block_size
    blocks = [sorted(token_ids[k:k + block_size]) for k in range(0, whole, block_size)]
    return block_hashes([t for block in blocks for t in block], block_size, parent)


def names_the_partial_block(token_ids, block_size, parent=None):
    """Pads a partial last block with zeros and names it too."""
    return block_hashes(token_ids + [0] * (-len(token_ids) % block_size), block_size, parent)


def ignores_the_parent(token_ids, block_size, parent=None):
    """Starts every call's chain afresh."""
    return block_hashes(token_ids, block_size)


def chained(name_one_block):
    """A block_hashes that names each full block by name_one_block(parent's name or b"", its ids), in a chain."""
    def block_hashes_by(token_ids, block_size, parent=None):
        names = []
        for k in range(0, len(token_ids) - block_size + 1, block_size):
            parent = name_one_block(parent or b"", token_ids[k:k + block_size])
            names.append(parent)
        return names
    block_hashes_by.__name__, block_hashes_by.__doc__ = name_one_block.__name__, name_one_block.__doc__
    return block_hashes_by


@chained
def runs_the_digits_together(parent, block):
    """sha256 of the parent and the ids written as decimal text, with no separator."""
    return hashlib.sha256(parent + "".join(map(str, block)).encode()).digest()


@chained
def cuts_ids_to_a_byte(parent, block):
    """sha256 of the parent and the ids as bytes(id % 256): a 49,152-token vocabulary does not fit."""
    return hashlib.sha256(parent + bytes(t % 256 for t in block)).digest()


@chained
def cuts_ids_to_two_bytes(parent, block):
    """sha256 of the parent and the ids as unsigned shorts, masked to fit."""
    return hashlib.sha256(parent + struct.pack(f"<{len(block)}H", *(t & 0xFFFF for t in block))).digest()


@chained
def polynomial_in_base_31(parent, block):
    """A rolling hash, h * 31 + id, carried through the chain in 128 bits."""
    h = int.from_bytes(parent, "little")
    for t in block:
        h = (h * 31 + t) % 2**128
    return h.to_bytes(16, "little")


@chained
def pythons_hash(parent, block):
    """Python's hash() of (parent, ids), as 8 bytes: fast, and 64 bits."""
    return hash((parent, tuple(block))).to_bytes(8, "little", signed=True)


@chained
def pythons_hash_widened(parent, block):
    """Python's hash() of (parent, ids), widened to 16 bytes: long enough, and still 64 bits of hash."""
    return hash((parent, tuple(block))).to_bytes(16, "little", signed=True)


@chained
def keeps_the_whole_prefix(parent, block):
    """Names a block by its parent's name followed by a digest of its own ids: no collision, and no bound on its
    size."""
    return parent + hashlib.sha256(struct.pack(f"<{len(block)}I", *block)).digest()


# --- task 1, longest_cached_prefix ------------------------------------------------------------------------

def counts_every_cached_hash(hashes, cached):
    """Counts the cached names, those after a missing one included."""
    return sum(h in cached for h in hashes)


def stops_one_early(hashes, cached):
    """Leaves the last cached block out of the hit."""
    return max(0, longest_cached_prefix(hashes, cached) - 1)


def takes_block_0_for_missing(hashes, cached):
    """Tests cached.get(name) for truth: a name cached in block 0 reads as missing."""
    return longest_cached_prefix(hashes, {h: block for h, block in cached.items() if block})


def pops_what_it_finds(hashes, cached):
    """Takes the hits out of the pool's map once counted."""
    n = longest_cached_prefix(hashes, cached)
    for h in hashes[:n]:
        cached.pop(h)
    return n


# --- task 2: choose_eviction ------------------------------------------------------------------------------

def returns_the_index(candidates):
    """Returns where the chosen block is among the candidates, not the block."""
    return [c.block for c in candidates].index(reference_eviction(candidates))


def returns_the_candidate(candidates):
    """Returns the CachedBlock itself."""
    return next(c for c in candidates if c.block == reference_eviction(candidates))


def evicts_the_most_reused(candidates):
    """Counts hits the wrong way round: the hot prologues go first."""
    return max(candidates, key=lambda c: (c.hits, c.depth, -c.last_used)).block


def least_frequently_used(candidates):
    """Fewest hits first: beats least recently used while the hot prologues stay hot, and holds on to them
    after their traffic has moved on."""
    return min(candidates, key=lambda c: (c.hits, -c.depth, c.last_used)).block


def evicts_the_deepest(candidates):
    """Only tails first: a cold prologue's head stays as long as a hot one's."""
    return max(candidates, key=lambda c: (c.depth, -c.last_used)).block


CONTROLS = [
    (names_each_block_alone, check_equal_names_iff_equal_prefixes, "rule 2: equal names if and only if equal prefixes"),
    (ignores_order_within_a_block, check_equal_names_iff_equal_prefixes, "rule 2: equal names if and only if"),
    (names_the_partial_block, check_full_blocks_only, "rule 1: only full blocks are named"),
    (ignores_the_parent, check_the_parent_counts, "rule 2: the parent is part of the prefix"),
    (ignores_the_parent, check_pieces, "rule 3: naming in pieces gives what naming in one go gives"),
    (runs_the_digits_together, check_chosen_ids, "decimal digits, run together"),
    (cuts_ids_to_a_byte, check_chosen_ids, "ids cut to one byte"),
    (cuts_ids_to_two_bytes, check_chosen_ids, "ids cut to two bytes"),
    (polynomial_in_base_31, check_chosen_ids, "a polynomial hash in base 31"),
    (pythons_hash, check_full_blocks_only, "rule 4: a name has at least 16 bytes"),
    (pythons_hash_widened, check_chosen_ids, "Python's hash\\(\\) gives both tuples the same value"),
    (keeps_the_whole_prefix, check_chosen_ids, "rule 4: a name has one length for every block"),
    (counts_every_cached_hash, check_lookup, "rule 1: every block of the hit is cached"),
    (stops_one_early, check_lookup, "rule 2: the hit is as long as the cache allows"),
    (takes_block_0_for_missing, check_block_zero, "rule 3: presence is membership"),
    (pops_what_it_finds, check_read_only, "the contract: longest_cached_prefix reads `hashes` and `cached`"),
    (returns_the_index, check_eviction_contract, "rule 1: return the `block` of one of the candidates"),
    (returns_the_candidate, check_eviction_contract, "rule 1: return the `block` of one of the candidates"),
    (least_recently_used, check_eviction_beats_lru, "the outcome: beat least recently used's hit rate"),
    (evicts_the_most_reused, check_eviction_beats_lru, "the outcome: beat least recently used's hit rate"),
    (evicts_the_deepest, check_eviction_beats_lru, "the outcome: beat least recently used's hit rate"),
    (least_frequently_used, check_eviction_beats_lru, "one whose hot prologues change halfway"),
]


@pytest.mark.parametrize("wrong,check,rule", CONTROLS, ids=[f"{w.__name__}-{c.__name__}" for w, c, _ in CONTROLS])
def test_a_plausible_mistake_fails_the_rule_it_breaks(wrong, check, rule):
    with pytest.raises((AssertionError, Failed), match=rule):
        check(wrong)


REFERENCE = {block_hashes: (check_full_blocks_only, check_equal_names_iff_equal_prefixes, check_the_parent_counts,
                            check_pieces, check_chosen_ids),
             longest_cached_prefix: (check_lookup, check_block_zero, check_read_only),
             reference_eviction: (check_eviction_contract, check_eviction_beats_lru)}


@pytest.mark.parametrize("reference,check", [(r, c) for r, checks in REFERENCE.items() for c in checks],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_the_reference_passes(reference, check):
    """Without this, a check that fails everything would pass every control."""
    check(reference)


@chained
def blake2b_of_the_repr(parent, block):
    """A naming of a learner's own, unlike minicb's: a 16-byte BLAKE2b of the parent and repr(block)."""
    return hashlib.blake2b(parent + repr(block).encode(), digest_size=16).digest()


@pytest.mark.parametrize("check", REFERENCE[block_hashes], ids=lambda c: c.__name__)
def test_a_naming_unlike_minicbs_that_keeps_the_contract_passes(check):
    """How a name is made is the learner's decision: the checks must not ask for minicb's format."""
    check(blake2b_of_the_repr)


@pytest.mark.parametrize("engine", ["roomy", "chunked"])
def test_a_naming_unlike_minicbs_serves_as_minicbs_does(engine):
    check_engine(EngineParts(block_hashes=blake2b_of_the_repr), engine)


def test_least_recently_used_as_a_policy_is_the_default():
    """The baseline the outcome is measured against is what minicb runs: least_recently_used, given as a
    policy, evicts as the block manager's own LRU order does."""
    check_engine(EngineParts(choose_eviction=least_recently_used), "evicting")


@pytest.mark.parametrize("engine", ["roomy", "evicting"])
def test_a_lookup_that_takes_block_0_for_missing_fails_in_the_engine(engine):
    """The first request's first block is the pool's block 0, and later prompts share it."""
    with pytest.raises(AssertionError, match="a block cached as block 0 is cached"):
        check_engine(EngineParts(longest_cached_prefix=takes_block_0_for_missing), engine)


def test_a_lookup_that_counts_past_a_gap_fails_in_the_engine():
    with pytest.raises((AssertionError, ValueError),
                       match="every block of a hit is cached|leading hashes that are all"):
        check_engine(EngineParts(longest_cached_prefix=counts_every_cached_hash), "evicting")


def test_an_unchained_name_fails_in_the_engine():
    """Equal blocks after different prefixes share one name: where a request reuses such a block after its own,
    different, first block, the scheduler's check of the prefix a cached block was cached for fails."""
    with pytest.raises(AssertionError, match="block_hashes gave two different prefixes one name"):
        check_engine(EngineParts(block_hashes=names_each_block_alone), "roomy")
