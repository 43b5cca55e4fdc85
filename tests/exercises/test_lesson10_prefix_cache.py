"""Lesson 10's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions). The hashes
expected here are worked out from the rules, with hashlib and struct, not by minicb's block_hashes. Each check
takes the function it grades, so the negative controls at the end can show that plausible mistakes fail the
rule they break, by name. The engine tests run only their own task's function; the other one is minicb's."""
from __future__ import annotations

import functools
import hashlib
import struct
from types import MappingProxyType

import pytest
from grading import obeying, simulated_engine

from minicb import course
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.prefix_cache import block_hashes as reference_hashes
from minicb.prefix_cache import longest_cached_prefix as reference_lookup
from minicb.sampling import SamplingParams

mine = course.lesson("lesson10_prefix_cache")


def sha_chain(token_ids: list[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """Rules 1 to 3 written out: per full block, sha256 over the previous hash (parent, or nothing, for the
    first) and the block's ids packed one by one as 4-byte unsigned little-endian ints."""
    hashes, previous = [], parent or b""
    for k in range(len(token_ids) // block_size):
        packed = b"".join(struct.pack("<I", t) for t in token_ids[k * block_size:(k + 1) * block_size])
        previous = hashlib.sha256(previous + packed).digest()
        hashes.append(previous)
    return hashes


TOKENS = [(37 * i) % 250 + 3 for i in range(20)]   # 5 blocks of 4
HASHES = sha_chain(TOKENS, 4)


def hashes_of(fn, *args) -> list[bytes]:
    return obeying("block_hashes(token_ids, block_size, parent=None) returns a list of bytes", fn, *args)


def count_of(fn, hashes, cached) -> int:
    return obeying("longest_cached_prefix(hashes, cached) returns an int", fn, hashes, cached)


# --- task 1: block_hashes ---------------------------------------------------------------------------------

def check_full_blocks_only(fn) -> None:
    for n, size, want in [(7, 3, 2), (6, 3, 2), (8, 4, 2), (3, 4, 0), (0, 4, 0), (5, 1, 5)]:
        got = hashes_of(fn, TOKENS[:n], size)
        assert len(got) == want, (
            f"rule 1: only full blocks have a hash: {n} tokens in blocks of {size} give {n} // {size} = {want} "
            f"hashes (got {len(got)})")
    assert hashes_of(fn, TOKENS[:7], 3) == hashes_of(fn, TOKENS[:6], 3), (
        "rule 1: a partial last block changes nothing: 7 tokens in blocks of 3 hash as their first 6 do")


def check_bytes(fn) -> None:
    got = hashes_of(fn, [1, 2], 2)
    assert isinstance(got, list) and all(type(h) is bytes and len(h) == 32 for h in got), (
        f"rule 2: a list of sha256 digests, 32 bytes each (hashlib.sha256(...).digest(), not hexdigest): got {got!r}")
    want = hashlib.sha256(bytes.fromhex("01000000" "02000000")).digest()
    assert got == [want], (
        "rule 2: with no parent, the block [1, 2] hashes as sha256 of nothing before its ids, each packed as 4 "
        "bytes, unsigned, little-endian: 01 00 00 00 02 00 00 00")
    want = hashlib.sha256(bytes.fromhex("70110100" "ffffffff" "00000000")).digest()
    assert hashes_of(fn, [70000, 2**32 - 1, 0], 3) == [want], (
        "rule 2: every id takes 4 bytes, unsigned, little-endian, however large: 70000 is 70 11 01 00 and "
        "2**32 - 1 is ff ff ff ff")


def check_chain(fn) -> None:
    assert hashes_of(fn, TOKENS, 4) == HASHES, (
        "rule 3: block k's hash is sha256 of block k-1's hash followed by block k's packed ids: the chain")
    for k in range(5):
        changed = TOKENS.copy()
        changed[4 * k + 1] += 1
        got = hashes_of(fn, changed, 4)
        assert got[:k] == HASHES[:k], f"rule 3: a change in block {k} leaves the hashes of the blocks before it"
        assert all(a != b for a, b in zip(got[k:], HASHES[k:])), (
            f"rule 3: a change in block {k} changes its hash and the hash of every block after it")
    same = hashes_of(fn, [5, 6, 5, 6], 2)
    assert same[0] != same[1], "rule 3: an equal block at another place (after another prefix) hashes differently"
    assert hashes_of(fn, [1, 2, 5, 6], 2)[1] != hashes_of(fn, [3, 4, 5, 6], 2)[1], (
        "rule 3: the block [5, 6] after [1, 2] and after [3, 4] hashes differently: equal hashes, equal prefixes")


def check_parent(fn) -> None:
    parent = hashlib.sha256(b"some earlier prefix").digest()
    assert hashes_of(fn, TOKENS[:9], 4, parent) == sha_chain(TOKENS[:9], 4, parent), (
        "rule 4: with a parent, the first block's hash is sha256 of the parent followed by its packed ids")
    whole = hashes_of(fn, TOKENS, 4)
    head = hashes_of(fn, TOKENS[:12], 4)
    assert head + hashes_of(fn, TOKENS[12:], 4, head[-1]) == whole, (
        "rule 4: hashing 12 tokens, then the rest with parent = the last hash, gives the hashes of all 20 in one go")
    one_by_one, last = [], None
    for k in range(5):   # as the engine does: each block once, as it fills, from the last known hash
        one_by_one += hashes_of(fn, TOKENS[4 * k:4 * k + 4], 4, last)
        last = one_by_one[-1]
    assert one_by_one == whole, "rule 4: hashing block by block, each from the previous hash, gives one go's hashes"


def test_lesson10_task1_only_full_blocks_have_a_hash():
    check_full_blocks_only(mine.block_hashes)


def test_lesson10_task1_the_bytes_are_sha256_of_the_packed_ids():
    check_bytes(mine.block_hashes)


def test_lesson10_task1_each_hash_chains_over_every_block_before_it():
    check_chain(mine.block_hashes)


def test_lesson10_task1_a_parent_continues_the_chain():
    check_parent(mine.block_hashes)


# --- task 2: longest_cached_prefix ------------------------------------------------------------------------

def check_leading(fn) -> None:
    for n in range(6):
        cached = {h: 10 + i for i, h in enumerate(HASHES[:n])}
        got = count_of(fn, HASHES, cached)
        assert got == n, f"rule 1: the first {n} of 5 hashes are cached (and nothing else): {n} (got {got!r})"
    other = hashlib.sha256(b"another prompt's block").digest()
    assert count_of(fn, HASHES, {HASHES[0]: 3, other: 4, HASHES[1]: 5}) == 2, (
        "rule 1: cached blocks of other prompts do not count; the first two hashes are cached: 2")


def check_gap(fn) -> None:
    h = HASHES
    assert count_of(fn, h, {h[0]: 1, h[1]: 2, h[3]: 3, h[4]: 4}) == 2, (
        "rule 2: a hash present after a missing one does not count: blocks 0 and 1 are cached, 2 is missing, so 2 "
        "(not 4)")
    assert count_of(fn, h, {h[1]: 1, h[2]: 2}) == 0, (
        "rule 2: the first block is missing, so blocks 1 and 2 are of no use: 0")


def check_block_zero(fn) -> None:
    h = HASHES
    assert count_of(fn, h, {h[0]: 0, h[1]: 7}) == 2, (
        "rule 3: presence is membership (hash in cached): a hash cached as block 0 is cached")
    assert count_of(fn, h, {h[0]: 4, h[1]: 0, h[2]: 9}) == 3, "rule 3: block 0 is a block like any other"


def check_empty(fn) -> None:
    assert count_of(fn, [], {HASHES[0]: 1}) == 0, "rule 4: no hashes to look up: 0"
    assert count_of(fn, HASHES, {}) == 0, "rule 4: an empty cache holds none of them: 0"


def check_read_only(fn) -> None:
    cached = {HASHES[0]: 3, HASHES[2]: 5}
    hashes = list(HASHES)
    assert count_of(fn, hashes, cached) == 1
    assert cached == {HASHES[0]: 3, HASHES[2]: 5} and hashes == HASHES, (
        "rule 5: looking up changes neither `cached` (the pool's own map) nor `hashes`")
    got = obeying("rule 5: `cached` is only read (here it is a read-only mapping)", fn, HASHES,
                  MappingProxyType({HASHES[0]: 3, HASHES[1]: 5}))
    assert got == 2, "rule 1: the first two hashes are cached in the read-only mapping: 2"


def test_lesson10_task2_counts_the_leading_cached_hashes():
    check_leading(mine.longest_cached_prefix)


def test_lesson10_task2_a_hash_after_a_missing_one_does_not_count():
    check_gap(mine.longest_cached_prefix)


def test_lesson10_task2_a_hash_cached_as_block_0_is_cached():
    check_block_zero(mine.longest_cached_prefix)


def test_lesson10_task2_nothing_to_look_up_gives_0():
    check_empty(mine.longest_cached_prefix)


def test_lesson10_task2_the_cache_is_only_read():
    check_read_only(mine.longest_cached_prefix)


# --- the engine, running yours ----------------------------------------------------------------------------

BASE = [(53 * i) % 300 + 5 for i in range(23)]
# Prefixes ending inside a block, at a block's edge and several blocks in (block_size 4), each with a few
# tails; one prompt is all prefix, one is a prefix of another prompt. Twice over: the second round hits.
PROMPTS = [BASE[:n] + tail for n in (2, 4, 8, 13, 23) for tail in ([101, 7], [102, 8, 9, 10, 11], [])] * 2
ENGINES = {
    "roomy": dict(num_blocks=256),
    "evicting": dict(num_blocks=24, preemption_mode="recompute"),
    "chunked": dict(num_blocks=24, enable_chunked_prefill=True, long_prefill_token_threshold=6,
                    max_num_batched_tokens=16),
}


def serve(parts: EngineParts, **config) -> dict[str, tuple[list[int], int]]:
    """request id -> (its tokens, its num_cached_tokens), on the simulator, the pool checked every step
    (a block's name must be the chain hash of the tokens it was cached with)."""
    engine = simulated_engine(parts, **{"block_size": 4, "max_num_seqs": 4, "enable_prefix_caching": True, **config})
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(prompt, SamplingParams(max_tokens=6, ignore_eos=True), request_id=f"r{i}")
    results = {}
    for _ in range(2000):
        if not engine.has_unfinished_requests():
            break
        results.update((o.request_id, (o.outputs[0].token_ids, o.num_cached_tokens)) for o in engine.step()
                       if o.finished)
    assert not engine.has_unfinished_requests(), "the run did not finish in 2,000 steps: a request starves"
    return results


@functools.cache
def served_by_minicb(engine: str) -> dict[str, tuple[list[int], int]]:
    return serve(EngineParts(), **ENGINES[engine])


def check_engine(parts: EngineParts, engine: str) -> None:
    yours, reference = serve(parts, **ENGINES[engine]), served_by_minicb(engine)
    assert sum(cached for _, cached in reference.values()) > 0, "the workload hits the cache"
    for rid, (tokens, cached) in reference.items():
        assert rid in yours, f"request {rid!r} did not finish"
        assert yours[rid][1] == cached, (
            f"request {rid!r} found {yours[rid][1]} of its prompt tokens in the cache, {cached} with minicb's parts")
        assert yours[rid][0] == tokens, f"request {rid!r} got other tokens than with minicb's parts"


@pytest.mark.parametrize("engine", list(ENGINES))
def test_lesson10_task1_the_engine_caches_under_your_hashes(engine):
    check_engine(EngineParts(block_hashes=mine.block_hashes), engine)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_lesson10_task2_the_engine_looks_up_with_yours(engine):
    check_engine(EngineParts(longest_cached_prefix=mine.longest_cached_prefix), engine)


# Bard, the real network: a shared prompt, then requests that extend it. Same hits, same blocks, same logits.
BARD_PROMPTS = [BASE[:13] + [101], BASE[:13] + [7, 8], BASE, BASE[:5] + [9]]


def bard(parts: EngineParts) -> list[tuple[list[int], int]]:
    llm = LLM(None, device="cpu", block_size=4, num_blocks=64, max_num_seqs=2, enable_prefix_caching=True,
              check_kv_invariants=True, parts=parts)
    outputs = llm.generate(BARD_PROMPTS, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    return [(o.outputs[0].token_ids, o.num_cached_tokens) for o in outputs]


@functools.cache
def bard_with_minicb() -> list[tuple[list[int], int]]:
    return bard(EngineParts())


def check_bard(parts: EngineParts) -> None:
    got, want = bard(parts), bard_with_minicb()
    assert sum(cached for _, cached in want) > 0, "the prompts hit the cache"
    assert [c for _, c in got] == [c for _, c in want], "Bard finds as many cached tokens as with minicb's parts"
    assert got == want, "Bard generates what it generates with minicb's parts: the same hits give the same logits"


def test_lesson10_task1_bard_generates_the_same_on_your_hashes():
    check_bard(EngineParts(block_hashes=mine.block_hashes))


def test_lesson10_task2_bard_generates_the_same_on_your_lookup():
    check_bard(EngineParts(longest_cached_prefix=mine.longest_cached_prefix))


# --- negative controls: plausible mistakes, each failing the rule it breaks ------------------------------

def packed(block) -> bytes:
    return struct.pack(f"<{len(block)}I", *block)


def blocks(token_ids, block_size, whole=True):
    end = len(token_ids) - block_size + 1 if whole else len(token_ids)
    return [token_ids[i:i + block_size] for i in range(0, max(end, 0), block_size)]


def no_chaining(token_ids, block_size, parent=None):
    """Names each block by its own ids: equal blocks after different prefixes get one name."""
    return [hashlib.sha256(packed(b)).digest() for b in blocks(token_ids, block_size)]


def hashes_the_partial_block(token_ids, block_size, parent=None):
    """Also names the last block while it is still being written."""
    hashes, previous = [], parent or b""
    for block in blocks(token_ids, block_size, whole=False):
        previous = hashlib.sha256(previous + packed(block)).digest()
        hashes.append(previous)
    return hashes


def hashes_text(token_ids, block_size, parent=None):
    """Hashes the ids as text, not as 4-byte little-endian ints."""
    hashes, previous = [], parent or b""
    for block in blocks(token_ids, block_size):
        previous = hashlib.sha256(previous + ",".join(map(str, block)).encode()).digest()
        hashes.append(previous)
    return hashes


def ignores_the_parent(token_ids, block_size, parent=None):
    """Starts every call's chain afresh."""
    return reference_hashes(token_ids, block_size)


def counts_every_cached_hash(hashes, cached):
    """Counts all the cached hashes, those after a missing one included."""
    return sum(h in cached for h in hashes)


def takes_block_0_for_missing(hashes, cached):
    """Tests cached.get(h) for truth: block 0 reads as missing."""
    n = 0
    while n < len(hashes) and cached.get(hashes[n]):
        n += 1
    return n


def pops_what_it_finds(hashes, cached):
    """Takes the hits out of the pool's map as it goes."""
    n = 0
    while n < len(hashes) and cached.pop(hashes[n], None) is not None:
        n += 1
    return n


CHECKS = (check_full_blocks_only, check_bytes, check_chain, check_parent,
          check_leading, check_gap, check_block_zero, check_empty, check_read_only)


@pytest.mark.parametrize("wrong,check,rule", [
    (no_chaining, check_chain, "rule 3: block k's hash is sha256 of block k-1's hash"),
    (hashes_the_partial_block, check_full_blocks_only, "rule 1: only full blocks have a hash"),
    (hashes_text, check_bytes, "rule 2: with no parent, the block"),
    (ignores_the_parent, check_parent, "rule 4: with a parent"),
    (counts_every_cached_hash, check_gap, "rule 2: a hash present after a missing one does not count"),
    (takes_block_0_for_missing, check_block_zero, "rule 3: presence is membership"),
    (pops_what_it_finds, check_read_only, "rule 5: looking up changes neither"),
], ids=["no chaining", "partial block hashed", "ids hashed as text", "parent ignored", "every cached hash counted",
        "block 0 taken for missing", "cache changed"])
def test_grading_catches_a_plausible_mistake(wrong, check, rule):
    """A negative control: the reference passes every check, the mistake fails its rule by name."""
    for passing in CHECKS:
        passing(reference_hashes if passing in CHECKS[:4] else reference_lookup)
    with pytest.raises(AssertionError, match=rule):
        check(wrong)


def test_grading_catches_an_unchained_hash_in_the_engine():
    """A negative control: a hash without the chain serves wrong K/V for equal blocks after different
    prefixes; the engine test fails it."""
    with pytest.raises(AssertionError, match="prefix hash is not the chain hash of the tokens it was cached with"):
        check_engine(EngineParts(block_hashes=no_chaining), "roomy")
