"""Lesson 10's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).

Each task is checked twice: its contract on random cases (hypothesis, whose failure is the smallest case it
found, said in words) and its outcome against minicb's own. Names are never compared with minicb's (how a name is
made is the learner's decision): only which are equal, their size, and pairs of blocks chosen to collide under
plausible namings. Expected hits and tokens come from the engine on minicb's parts; the eviction policy's target
from least recently used on the same workloads. Every check takes the function it grades, so that
tests/graders/test_lesson10_controls.py can show plausible mistakes failing the rule they break, by name."""
from __future__ import annotations

import functools
import hashlib
from types import MappingProxyType

import held_out
import pytest
from grading import obeying, require, simulated_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from minicb import course
from minicb.kv.eviction import CachedBlock
from minicb.lab.workload import hot_and_cold_prompts
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson10_prefix_cache")

CONTRACT = settings(max_examples=60, deadline=None, report_multiple_bugs=False)   # one counterexample, the smallest


def names_of(fn, token_ids, block_size, parent=None) -> list[bytes]:
    got = obeying("block_hashes(token_ids, block_size, parent=None) returns a list of names", fn,
                  list(token_ids), block_size, parent)
    assert isinstance(got, list) and all(type(h) is bytes for h in got), (
        f"rule 4: a list of names, each of type bytes: block_hashes({shown(token_ids)}, {block_size}) gave {got!r:.200}")
    short = [h for h in got if len(h) < MIN_NAME_BYTES]
    assert not short, (
        f"rule 4: a name has at least {MIN_NAME_BYTES} bytes: block_hashes({shown(token_ids)}, {block_size}) gave one "
        f"of {len(short[0])}. A name that short is a collision someone can search for")
    return got


def shown(token_ids, limit: int = 12) -> str:
    return str(list(token_ids)) if len(token_ids) <= limit else f"[{', '.join(map(str, token_ids[:limit]))}, ...]"


# --- task 1, block_hashes ---------------------------------------------------------------------------------

MIN_NAME_BYTES = 16
ids = st.lists(st.integers(0, 2**32 - 1), max_size=40)
small_alphabet = st.lists(st.integers(0, 2), max_size=12)   # equal blocks are frequent, so collisions show
sizes = st.integers(1, 5)


def check_full_blocks_only(fn) -> None:
    @CONTRACT
    @given(ids, sizes)
    def full_blocks(token_ids, block_size):
        got = names_of(fn, token_ids, block_size)
        want = len(token_ids) // block_size
        assert len(got) == want, (
            f"rule 1: only full blocks are named: {len(token_ids)} id(s) in blocks of {block_size} give {want} "
            f"name(s), not {len(got)}")
        whole = token_ids[:want * block_size]
        assert got == names_of(fn, whole, block_size), (
            f"rule 1: a partial last block changes nothing: {shown(token_ids)} in blocks of {block_size} is named as "
            f"its first {len(whole)} ids are")
    full_blocks()


def check_equal_names_iff_equal_prefixes(fn) -> None:
    @CONTRACT
    @given(small_alphabet, small_alphabet, st.integers(1, 3))
    def iff(a, b, block_size):
        names_a, names_b = names_of(fn, a, block_size), names_of(fn, b, block_size)
        wrong = [(i, j, name_a == name_b) for i, name_a in enumerate(names_a) for j, name_b in enumerate(names_b)
                 if (name_a == name_b) != (a[:(i + 1) * block_size] == b[:(j + 1) * block_size])]
        if wrong:
            i, j, equal = wrong[0]
            pytest.fail(f"rule 2: equal names if and only if equal prefixes: block {i} of {a} and block {j} of {b} "
                        f"(blocks of {block_size}) get {'equal' if equal else 'different'} names, but their prefixes "
                        f"{a[:(i + 1) * block_size]} and {b[:(j + 1) * block_size]} are "
                        f"{'different' if equal else 'equal'}")
    iff()


def check_the_parent_counts(fn) -> None:
    @CONTRACT
    @given(st.lists(st.integers(0, 50), min_size=1, max_size=12), sizes, st.binary(min_size=32, max_size=32),
           st.binary(min_size=32, max_size=32))
    def parent_counts(token_ids, block_size, one, other):
        if len(token_ids) < block_size or one == other:
            return
        unparented = names_of(fn, token_ids, block_size)
        after_one, after_other = names_of(fn, token_ids, block_size, one), names_of(fn, token_ids, block_size, other)
        assert after_one != unparented and after_one[0] != after_other[0], (
            f"rule 2: the parent is part of the prefix: {shown(token_ids)} in blocks of {block_size} must get other "
            "names after no parent, after one parent and after another, and yours do not differ")
        assert after_one == names_of(fn, token_ids, block_size, one), "rule 2: one prefix, one name, every time"
    parent_counts()


def check_pieces(fn) -> None:
    @CONTRACT
    @given(ids, sizes, st.integers(0, 10))
    def pieces(token_ids, block_size, cut_blocks):
        whole = names_of(fn, token_ids, block_size)
        cut = min(cut_blocks, len(whole)) * block_size
        if cut == 0:
            return
        head = names_of(fn, token_ids[:cut], block_size)
        tail = names_of(fn, token_ids[cut:], block_size, head[-1])
        assert head + tail == whole, (
            f"rule 3: naming in pieces gives what naming in one go gives: {shown(token_ids)} in blocks of "
            f"{block_size}, named as its first {cut} ids and then the rest with parent = the last name, differs "
            "from naming it whole")
        one_by_one, last = [], None
        for start in range(0, len(whole) * block_size, block_size):   # as the engine does: each block as it fills
            one_by_one += names_of(fn, token_ids[start:start + block_size], block_size, last)
            last = one_by_one[-1]
        assert one_by_one == whole, (
            f"rule 3: naming {shown(token_ids)} block by block (blocks of {block_size}), each after the name before "
            "it, differs from naming it whole")
    pieces()


# Pairs of different blocks (blocks of 2) that plausible namings confuse, with what each one confuses.
CHOSEN_TO_COLLIDE = [
    ([1, 23], [12, 3], "the ids' decimal digits, run together, read the same"),
    ([1, 2], [257, 2], "ids cut to one byte are the same"),
    ([1, 2], [65537, 2], "ids cut to two bytes are the same"),
    ([1, 2], [2**24 + 1, 2], "ids cut to three bytes are the same"),
    ([2**31, 0], [0, 0], "ids read as signed 32-bit numbers, or cut to 31 bits, are the same"),
    ([2, 0], [0, 1], "their ids weighted by place add up to the same"),
    ([1, 2], [3, 0], "their ids xor to the same"),
    ([290633570, 2676812896], [361813383, 0], "Python's hash() gives both tuples the same value"),
] + [([0, base], [1, 0], f"a polynomial hash in base {base} gives both the same") for base in
     (31, 33, 37, 101, 131, 257, 65599, 1_000_003, 2**31 - 1)]


def check_chosen_ids(fn) -> None:
    lengths = set()
    for parent in (None, hashlib.sha256(b"a parent").digest()):
        for one, other, confused in CHOSEN_TO_COLLIDE:
            name_one, name_other = names_of(fn, one, 2, parent)[0], names_of(fn, other, 2, parent)[0]
            assert name_one != name_other, (
                f"rule 4: rule 2 against chosen ids: blocks {one} and {other} (blocks of 2, parent "
                f"{'given' if parent else None}) get one name: {confused}, and a user who sends one can read the "
                "K/V of another's")
            lengths |= {len(name_one), len(name_other)}
    for token_ids in ([7] * 2, [7] * 64, list(range(2, 2**32, 2**26))):
        lengths |= {len(name) for name in names_of(fn, token_ids, 2)}
    assert len(lengths) == 1, (
        f"rule 4: a name has one length for every block, however long its prefix: yours have {sorted(lengths)} bytes")


def test_lesson10_task1_only_full_blocks_are_named():
    check_full_blocks_only(mine.block_hashes)


def test_lesson10_task1_equal_names_iff_equal_prefixes():
    check_equal_names_iff_equal_prefixes(mine.block_hashes)


def test_lesson10_task1_the_parent_is_part_of_the_prefix():
    check_the_parent_counts(mine.block_hashes)


def test_lesson10_task1_naming_in_pieces_is_naming_in_one_go():
    check_pieces(mine.block_hashes)


def test_lesson10_task1_chosen_ids_do_not_collide():
    check_chosen_ids(mine.block_hashes)


# --- task 1, longest_cached_prefix ------------------------------------------------------------------------

NAMES = [hashlib.sha256(f"block {k}".encode()).digest() for k in range(10)]
FOREIGN = [hashlib.sha256(f"another prompt's block {k}".encode()).digest() for k in range(3)]


def count_of(fn, hashes, cached) -> int:
    got = obeying("longest_cached_prefix(hashes, cached) returns an int", fn, hashes, cached)
    assert type(got) is int and 0 <= got <= len(hashes), (
        f"the result is an int from 0 to len(hashes) = {len(hashes)}: got {got!r}")
    return got


def described(num_blocks: int, cached_blocks: set[int]) -> str:
    held = ", ".join(map(str, sorted(cached_blocks)))
    return f"a prompt of {num_blocks} block(s), of which the cache holds " + (f"block(s) {held}" if held else "none")


def check_lookup(fn) -> None:
    @settings(max_examples=100, deadline=None, report_multiple_bugs=False)
    @given(st.integers(0, 8), st.data())
    def lookup(num_blocks, data):
        hashes = NAMES[:num_blocks]
        in_cache = data.draw(st.sets(st.integers(0, num_blocks - 1)) if num_blocks else st.just(set()), "cached")
        foreign = data.draw(st.sets(st.integers(0, len(FOREIGN) - 1)), "foreign")
        ids_ = data.draw(st.lists(st.integers(0, 63), min_size=len(in_cache) + len(foreign),
                                  max_size=len(in_cache) + len(foreign)), "block ids")
        cached = dict(zip([hashes[k] for k in sorted(in_cache)] + [FOREIGN[k] for k in sorted(foreign)], ids_))
        got = count_of(fn, list(hashes), cached)
        where = described(num_blocks, in_cache)
        assert all(h in cached for h in hashes[:got]), (
            f"rule 1: every block of the hit is cached: {where}; you said {got}, but block "
            f"{next(k for k in range(got) if hashes[k] not in cached)} is not cached, and a block after a missing "
            "one is of no use")
        assert got == num_blocks or hashes[got] not in cached, (
            f"rule 2: the hit is as long as the cache allows: {where}; you said {got}, but block {got} is cached too")
    for in_cache, want in (({0, 2, 3}, 1), ({1, 2}, 0), ({0, 1}, 2)):   # cached blocks after a gap, first
        got = count_of(fn, NAMES[:4], {NAMES[k]: 7 + k for k in in_cache})
        rule = ("rule 1: every block of the hit is cached, and a block after a missing one is of no use" if got > want
                else "rule 2: the hit is as long as the cache allows")
        assert got == want, f"{rule}: {described(4, in_cache)}: {want}, not {got}"
    lookup()


def check_block_zero(fn) -> None:
    assert count_of(fn, NAMES[:3], {NAMES[0]: 0, NAMES[1]: 0}) == 2, (
        "rule 3: presence is membership: blocks 0 and 1 of 3 are cached, both in the pool's block 0: 2")
    assert count_of(fn, NAMES[:3], {NAMES[0]: 4, NAMES[1]: 0, NAMES[2]: 9}) == 3, (
        "rule 3: presence is membership: all 3 blocks are cached, the second one in the pool's block 0: 3")


def check_read_only(fn) -> None:
    cached = {NAMES[0]: 3, NAMES[2]: 5, FOREIGN[0]: 1}
    hashes = NAMES[:4]
    count_of(fn, hashes, cached)
    assert cached == {NAMES[0]: 3, NAMES[2]: 5, FOREIGN[0]: 1} and hashes == NAMES[:4], (
        "the contract: longest_cached_prefix reads `hashes` and `cached` (the pool's own map) and changes neither")
    got = obeying("the contract: `cached` is only read (here it is a read-only mapping, and hashes a tuple)", fn,
                  tuple(NAMES[:3]), MappingProxyType({NAMES[0]: 3, NAMES[1]: 5}))
    assert got == 2, f"rule 2: blocks 0 and 1 of 3 are cached (in a read-only mapping): 2, not {got!r}"


def test_lesson10_task1_the_hit_is_the_leading_run_of_cached_blocks():
    check_lookup(mine.longest_cached_prefix)


def test_lesson10_task1_a_block_cached_as_block_0_is_cached():
    check_block_zero(mine.longest_cached_prefix)


def test_lesson10_task1_the_cache_is_only_read():
    check_read_only(mine.longest_cached_prefix)


# --- task 1 in the engine, against minicb's parts --------------------------------------------------

BASE = [(53 * i) % 300 + 5 for i in range(23)]
# Prefixes ending inside a block, at a block's edge and several blocks in (block_size 4), each with a few
# tails; one prompt is all prefix, one is a prefix of another prompt. Twice over: the second round hits. The
# first request takes the pool's block 0 for the prefix every later one shares: a hit on block 0 counts.
PROMPTS = [BASE[:13] + [103]] + [BASE[:n] + tail for n in (2, 4, 8, 13, 23)
                                 for tail in ([101, 7], [102, 8, 9, 10, 11], [])] * 2
ENGINES = {
    "roomy": dict(num_blocks=256),
    "evicting": dict(num_blocks=24, preemption_mode="recompute"),
    "chunked": dict(num_blocks=24, enable_chunked_prefill=True, long_prefill_token_threshold=6,
                    max_num_batched_tokens=16),
}


def serve(parts: EngineParts, prompts: list[list[int]], **config) -> dict[str, tuple[list[int], int]]:
    """request id -> (its tokens, its num_cached_tokens), on the simulator, the pool checked every step (each
    cached block a request holds was cached for the request's own prefix, under the request's own names)."""
    # max_model_len: every prompt here and its 4 tokens fit in 64, and so does the smallest pool (24 blocks of 4)
    engine = simulated_engine(parts, **{"block_size": 4, "max_num_seqs": 4, "enable_prefix_caching": True,
                                        "max_model_len": 64, **config})
    for i, prompt in enumerate(prompts):
        engine.add_request(prompt, SamplingParams(max_tokens=4, ignore_eos=True), request_id=f"r{i}")
    results = {}
    for _ in range(3000):
        if not engine.has_unfinished_requests():
            break
        results.update((o.request_id, (o.outputs[0].token_ids, o.num_cached_tokens)) for o in engine.step()
                       if o.finished)
    assert not engine.has_unfinished_requests(), "the run did not finish in 3,000 steps: a request starves"
    return results


@functools.cache
def served_by_minicb(engine: str) -> dict[str, tuple[list[int], int]]:
    return serve(EngineParts(), PROMPTS, **ENGINES[engine])


def check_engine(parts: EngineParts, engine: str) -> None:
    yours, reference = serve(parts, PROMPTS, **ENGINES[engine]), served_by_minicb(engine)
    assert sum(cached for _, cached in reference.values()) > 0, "the workload hits the cache"
    for rid, (tokens, cached) in reference.items():
        assert rid in yours, f"request {rid!r} did not finish"
        assert yours[rid][1] <= cached, (
            f"every block of a hit is cached, from the prompt's first on: request {rid!r} found {yours[rid][1]} of "
            f"its prompt tokens in the cache, {cached} with minicb's parts")
        assert yours[rid][1] == cached, (
            f"the hit is as long as the cache allows, and a block cached as block 0 is cached: request {rid!r} found "
            f"{yours[rid][1]} of its prompt tokens in the cache, {cached} with minicb's parts")
        assert yours[rid][0] == tokens, f"request {rid!r} got other tokens than with minicb's parts"


@pytest.mark.parametrize("engine", list(ENGINES))
def test_lesson10_task1_the_engine_caches_under_your_names(engine):
    check_engine(EngineParts(block_hashes=mine.block_hashes), engine)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_lesson10_task1_the_engine_looks_up_with_yours(engine):
    check_engine(EngineParts(longest_cached_prefix=mine.longest_cached_prefix), engine)


# Bard, the real network: a shared prompt, then requests that extend it. Same hits, same blocks, same logits.
BARD_PROMPTS = [BASE[:13] + [101], BASE[:13] + [7, 8], BASE, BASE[:5] + [9]]


def bard(parts: EngineParts) -> list[tuple[list[int], int]]:
    llm = LLM(None, device="cpu", block_size=4, num_blocks=64, max_num_seqs=2, enable_prefix_caching=True,
              max_model_len=256, check_kv_invariants=True, parts=parts)
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


def test_lesson10_task1_bard_generates_the_same_on_your_names():
    check_bard(EngineParts(block_hashes=mine.block_hashes))


def test_lesson10_task1_bard_generates_the_same_on_your_lookup():
    check_bard(EngineParts(longest_cached_prefix=mine.longest_cached_prefix))


# --- task 2: choose_eviction ------------------------------------------------------------------------------

def candidates_strategy() -> st.SearchStrategy[tuple[CachedBlock, ...]]:
    """Cached blocks no table holds, least recently used first (last_used rising), as the pool offers them."""
    stats = st.tuples(st.integers(0, 6), st.integers(0, 5), st.integers(1, 4))   # depth, hits, gap in last_used
    return st.lists(st.tuples(st.integers(0, 63), stats), min_size=1, max_size=8, unique_by=lambda c: c[0]).map(
        lambda cs: tuple(CachedBlock(block, depth, hits, sum(gap for _, (_, _, gap) in cs[:k + 1]))
                         for k, (block, (depth, hits, _)) in enumerate(cs)))


def told(candidates) -> str:
    return "; ".join(f"block {c.block} (depth {c.depth}, {c.hits} hits, last used {c.last_used})" for c in candidates)


def check_eviction_contract(fn) -> None:
    @settings(max_examples=80, deadline=None, report_multiple_bugs=False)
    @given(candidates_strategy())
    def one_of_them(candidates):
        got = obeying("choose_eviction(candidates) returns a block id", fn, candidates)
        blocks = [c.block for c in candidates]
        assert type(got) is int and got in blocks, (
            f"rule 1: return the `block` of one of the candidates (an int; not its index, not the CachedBlock): "
            f"the candidates were {told(candidates)}; you returned {got!r}")
    one_of_them()


# The graded workloads (hot_and_cold_prompts): 3 hot prologues of 4 blocks, each request's with probability 1/2,
# else a cold one, used once; every prompt ends in a tail of its own. Half the workloads keep their hot
# prologues throughout; in the other half the hot set changes halfway, so that what was hot goes cold. A pool
# of 36 blocks of 4 keeps a few prologues beside the 4 running requests, not all of them.
POOL = dict(num_blocks=36, block_size=4, max_num_seqs=4)
MARGIN = 0.03
WORKLOADS = tuple((seed, phases) for phases in (1, 2) for seed in held_out.EVICTION)


def hit_rate(results: dict[str, tuple[list[int], int]], prompts: list[list[int]]) -> float:
    return sum(cached for _, cached in results.values()) / sum(map(len, prompts))


@functools.cache
def served_by_lru(seed: int, phases: int) -> dict[str, tuple[list[int], int]]:
    return serve(EngineParts(), hot_and_cold_prompts(seed, phases=phases), **POOL)


def check_eviction_beats_lru(fn) -> float:
    """The smallest gain over least recently used's hit rate, on the held-out workloads."""
    gains = []
    for i, (seed, phases) in enumerate(WORKLOADS):
        prompts, lru = hot_and_cold_prompts(seed, phases=phases), served_by_lru(seed, phases)
        yours = serve(EngineParts(choose_eviction=fn), prompts, **POOL)
        tokens = {rid: tokens for rid, (tokens, _) in yours.items()}
        require(tokens == {rid: tokens for rid, (tokens, _) in lru.items()},
                "every request gets the tokens it gets under least recently used: eviction changes hits, never tokens")
        mine_rate, lru_rate = hit_rate(yours, prompts), hit_rate(lru, prompts)
        kind = "whose hot prologues change halfway" if phases > 1 else "whose hot prologues stay hot"
        assert mine_rate >= lru_rate + MARGIN, (
            f"the outcome: beat least recently used's hit rate by {MARGIN * 100:.0f} percentage points on every "
            f"workload: on {held_out.place(i, WORKLOADS)}, one {kind}, yours is {mine_rate:.1%}, least "
            f"recently used's {lru_rate:.1%}")
        gains.append(mine_rate - lru_rate)
    return min(gains)


def test_lesson10_task2_the_policy_evicts_one_of_the_candidates():
    check_eviction_contract(mine.choose_eviction)


def test_lesson10_task2_the_policy_beats_lru_on_hot_and_cold_prologues(record_property):
    gain = check_eviction_beats_lru(mine.choose_eviction)
    record_property("margin", f"the hit rate beats least recently used's by at least {gain * 100:.1f} percentage "
                              f"points on each held-out workload (at least {MARGIN * 100:.0f})")
