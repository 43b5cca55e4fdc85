"""Prefix caching (EngineConfig.enable_prefix_caching): the chain hash, the block manager's cache
(hits, ref counts, LRU eviction, invariants), and the engine: with caching on, every request's tokens
equal its solo run without caching, while the prefill it computes drops by its cached prefix."""
from __future__ import annotations

import hashlib
import struct

import pytest

from conftest import NEAR_TIE_GAP, RELIABILITY_COUNTS
from minicb.course.contracts import checked
from minicb.course.pool_rules import check_cached_content, check_pool
from minicb.config import EngineConfig
from minicb.kv.block_manager import BlockManager
from minicb.kv.prefix_cache import block_hashes, longest_cached_prefix
from minicb.lab.near_tie import top2_gap
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.stats.metrics import summarize

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


# --- the chain hash ------------------------------------------------------------------------------

def test_block_hashes_is_the_documented_chain_of_sha256():
    """An independent reference, byte by byte as the docstring says."""
    tokens, size, want, parent = [3, 1, 4, 1, 5, 9, 2], 3, [], b""
    for k in range(len(tokens) // size):
        parent = hashlib.sha256(parent + b"".join(struct.pack("<I", t) for t in tokens[k * size:(k + 1) * size]))
        parent = parent.digest()
        want.append(parent)
    assert block_hashes(tokens, size) == want and len(want) == 2   # the partial last block has no hash
    assert block_hashes(tokens[3:], size, parent=want[0]) == want[1:]   # the chain continues from a parent


def test_equal_prefixes_hash_equal_and_a_change_in_block_k_changes_k_onward():
    a = list(range(1, 21))
    assert block_hashes(a, 4) == block_hashes(a + [99], 4) == block_hashes(a + [7, 7, 7], 4)
    for k in range(5):
        b = a.copy()
        b[4 * k + 2] += 1
        ha, hb = block_hashes(a, 4), block_hashes(b, 4)
        assert ha[:k] == hb[:k] and all(x != y for x, y in zip(ha[k:], hb[k:]))
    assert block_hashes([1, 2, 3], 4) == []
    assert block_hashes([5, 6, 7, 8], 4) != block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)[1:]   # position matters


def test_longest_cached_prefix_counts_only_leading_hits():
    h = block_hashes(list(range(16)), 4)
    assert longest_cached_prefix(h, {}) == 0
    assert longest_cached_prefix(h, {h[0]: 0, h[1]: 5, h[3]: 2}) == 2
    assert longest_cached_prefix(h, dict.fromkeys(h, 1)) == 4
    assert longest_cached_prefix([], {h[0]: 0}) == 0


# --- the block manager ---------------------------------------------------------------------------

def cached_manager(num_blocks: int = 8, block_size: int = 2) -> tuple[BlockManager, list[int], list[bytes]]:
    """A pool where "a" holds 5 tokens (3 blocks) and its first 2 full blocks are cached."""
    bm = BlockManager(num_blocks, block_size)
    tokens = [11, 12, 13, 14, 15]
    bm.allocate("a", 5)
    hashes = block_hashes(tokens, block_size)
    bm.cache_full_blocks("a", hashes, tokens)
    bm.check_invariants()
    return bm, tokens, hashes


def test_a_hit_shares_the_cached_blocks_and_counts_their_holders():
    bm, _, hashes = cached_manager()
    a = list(bm.tables["a"])
    assert bm.cached == {hashes[0]: a[0], hashes[1]: a[1]} and bm.block_hash == {a[0]: hashes[0], a[1]: hashes[1]}
    bm.set_prefix_hit("b", a[:2])
    assert bm.can_allocate(1)
    table = bm.allocate("b", 1)   # 4 cached tokens, then 1 new one in a block of its own
    assert table[:2] == a[:2] and table[2] not in a and bm.num_tokens["b"] == 5
    assert [bm.ref_counts[b] for b in a] == [2, 2, 1]
    bm.check_invariants()
    bm.free("a")
    assert [bm.ref_counts[b] for b in a] == [1, 1, 0] and a[2] in bm.free_blocks and not bm.evictable
    bm.free("b")   # now nobody holds the cached blocks: they wait in the LRU, named
    assert list(bm.evictable) == [a[1], a[0]]   # the deeper block first: it is evicted first
    assert bm.usage().free_blocks == 8
    bm.check_invariants()


def test_allocation_takes_unnamed_blocks_first_then_evicts_least_recently_used():
    bm, _, hashes = cached_manager(num_blocks=5)
    a = list(bm.tables["a"])
    bm.free("a")   # a[2] unnamed back on the free list; a[1], a[0] evictable in that order
    assert len(bm.free_blocks) == 3 and bm.can_allocate(10) and not bm.can_allocate(11)
    bm.allocate("c", 6)   # 3 blocks: the free list's, nothing evicted
    assert not set(bm.tables["c"]) & set(a[:2]) and list(bm.evictable) == [a[1], a[0]]
    bm.append_slots("c", 2)   # one more: the least recently used cached block goes, and its name with it
    assert bm.tables["c"][-1] == a[1] and hashes[1] not in bm.cached and a[1] not in bm.block_hash
    assert list(bm.evictable) == [a[0]] and bm.cached == {hashes[0]: a[0]}
    bm.check_invariants()


def test_an_eviction_policy_chooses_among_the_cached_blocks_no_table_holds():
    """Lesson 10's seam: the policy sees each evictable block's depth, hits and release clock, least recently
    used first, and the block it returns is the one evicted; a block that is not a candidate is refused."""
    offered = []

    def the_first_block_first(candidates):
        offered.append(candidates)
        return min(candidates, key=lambda c: c.depth).block

    bm, _, hashes = cached_manager(num_blocks=5)
    bm.choose_eviction = the_first_block_first
    a = list(bm.tables["a"])
    bm.set_prefix_hit("b", a[:1])
    bm.allocate("b", 1)   # a hit on a[0]
    bm.free("b")
    bm.free("a")   # a[1] is released before a[0], which b released already and a releases again
    bm.allocate("c", 8)   # 4 blocks: the 3 unnamed free ones, then one eviction, the policy's, not LRU's a[1]
    assert [[(c.block, c.depth, c.hits) for c in cs] for cs in offered] == [[(a[1], 1, 0), (a[0], 0, 1)]]
    assert offered[0][0].last_used < offered[0][1].last_used
    assert bm.cached == {hashes[1]: a[1]} and a[0] in bm.tables["c"] and list(bm.block_stats) == [a[1]]
    bm.check_invariants()
    bm, _, _ = cached_manager(num_blocks=3)
    bm.choose_eviction = checked(choose_eviction=lambda candidates: 99).choose_eviction   # the course's check
    bm.free("a")
    with pytest.raises(ValueError, match="choose_eviction returned 99: it must return the `block` of one of its 2"):
        bm.allocate("c", 6)


def test_a_cached_block_is_never_evicted_while_a_table_holds_it():
    bm, _, hashes = cached_manager(num_blocks=4)
    a = list(bm.tables["a"])
    bm.set_prefix_hit("b", a[:2])
    bm.allocate("b", 1)   # the last free block
    bm.free("a")          # a[0], a[1] still held by b; a[2] goes back
    assert not bm.evictable and not bm.can_allocate(3)
    bm.allocate("c", 2)
    assert bm.cached == {hashes[0]: a[0], hashes[1]: a[1]}
    bm.check_invariants()


def test_the_hit_being_admitted_does_not_count_as_evictable():
    bm, _, _ = cached_manager(num_blocks=4)
    a = list(bm.tables["a"])
    bm.free("a")   # 2 evictable + 2 free
    assert bm.can_allocate(8)
    bm.set_prefix_hit("b", a[:2])   # b reuses both: only the 2 free blocks are left for its other tokens
    assert bm.can_allocate(4) and not bm.can_allocate(5)
    bm.allocate("b", 4)
    assert bm.tables["b"][:2] == a[:2] and not bm.evictable
    bm.check_invariants()


@pytest.mark.parametrize("bug", ["keeps a name on eviction", "evictable and free", "wrong name", "shared unnamed"])
def test_the_invariants_catch_a_planted_bug(bug):
    bm, tokens, hashes = cached_manager()
    a = list(bm.tables["a"])
    if bug == "keeps a name on eviction":
        bm.free("a")
        bm.evictable.popitem(last=False)
        bm.free_blocks.append(a[1])
    elif bug == "evictable and free":
        bm.free("a")
        bm.free_blocks.append(a[0])
    elif bug == "wrong name":
        bm.block_origin[a[1]] = (hashes[0], [13, 99])
    else:
        bm.tables["b"], bm.num_tokens["b"] = [a[2]], 1
        bm.ref_counts[a[2]] += 1
    with pytest.raises(AssertionError):
        check_pool(bm)
    if bug != "wrong name":   # the engine's own check does not rename blocks to check their names
        with pytest.raises(AssertionError):
            bm.check_invariants()


def test_cached_content_must_match_the_sequences_tokens():
    bm, tokens, hashes = cached_manager()
    check_cached_content(bm, "a", tokens, hashes)
    with pytest.raises(AssertionError, match="cached under other tokens"):
        check_cached_content(bm, "a", [11, 12, 99, 14, 15], hashes)


def test_a_name_two_prefixes_share_is_caught_where_it_is_used():
    """b's second block equals a's, after another first block. A naming that forgets the parent names it as a's:
    b's hit on it passes the token check and fails the prefix check."""
    bm, tokens, hashes = cached_manager()
    other = [99, 12, 13, 14]
    bm.set_prefix_hit("b", [bm.tables["a"][1]])
    bm.allocate("b", 4)
    bm.tables["b"][0], bm.tables["b"][1] = bm.tables["b"][1], bm.tables["b"][0]   # the shared block at b's place 1
    with pytest.raises(AssertionError, match="cached after another prefix than the sequence's, under the same name"):
        check_cached_content(bm, "b", other, [block_hashes(other[:2], 2)[0], hashes[1]])


# --- the engine ----------------------------------------------------------------------------------

def test_prefix_caching_is_off_by_default_and_needs_paged_continuous_batching():
    assert EngineConfig().enable_prefix_caching is False
    for bad in (dict(batching="static"), dict(batching="padded"), dict(kv_reservation="contiguous")):
        with pytest.raises(ValueError, match="enable_prefix_caching needs batching='continuous'"):
            EngineConfig(enable_prefix_caching=True, **bad)


BASE = [(37 * i) % 250 + 3 for i in range(23)]
# Shared prefixes ending inside a block, at a block's edge and several blocks in (block_size 4), each
# with a few tails; one prompt is all prefix, one is a prefix of another prompt.
OTHER = [250 - t for t in BASE] + list(range(1, 14))   # 36 tokens sharing nothing with BASE
PROMPTS = [BASE[:n] + tail for n in (2, 4, 8, 13, 23) for tail in ([101, 7], [102, 8, 9, 10, 11], [])]

SOLO: dict[tuple[bool, tuple[int, ...]], list[int]] = {}


def solo_tokens(simulate: bool, prompt: list[int]) -> tuple[list[int], LLM]:
    """The prompt alone, on an engine without prefix caching."""
    llm = solo_llm(simulate)
    key = (simulate, tuple(prompt))
    if key not in SOLO:
        SOLO[key] = llm.generate([prompt], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    return SOLO[key], llm


_SOLO_LLMS: dict[bool, LLM] = {}


def solo_llm(simulate: bool) -> LLM:
    if simulate not in _SOLO_LLMS:
        _SOLO_LLMS[simulate] = LLM(None, device="cpu", simulate=simulate, num_blocks=256, block_size=4)
    return _SOLO_LLMS[simulate]


def assert_solo_equal(outputs, prompts, simulate: bool) -> int:
    """Every output's tokens are its prompt's solo run's; on the real network a divergence may only
    start at a near-tie (the rule of conftest.compare_greedy). Returns the near-ties."""
    near_ties = 0
    for output, prompt in zip(outputs, prompts):
        got = output.outputs[0].token_ids
        alone, llm = solo_tokens(simulate, prompt)
        diverged = next((k for k, (a, b) in enumerate(zip(got, alone)) if a != b), None)
        if diverged is None:
            assert got == alone
            continue
        assert not simulate, f"token {diverged} differs from the solo run: the stand-in must never diverge"
        gap = top2_gap(llm.engine.runner, prompt + alone[:diverged])
        assert gap < NEAR_TIE_GAP, f"token {diverged} differs from the solo run, top-2 gap {gap:.2e}"
        near_ties += 1
    RELIABILITY_COUNTS["near_ties"] += near_ties
    return near_ties


CONFIGS = {
    "roomy": dict(num_blocks=512),
    "recompute": dict(num_blocks=24, preemption_mode="recompute"),
    "swap": dict(num_blocks=24, preemption_mode="swap", swap_space_mb=1.0),
    "chunked": dict(num_blocks=24, enable_chunked_prefill=True, long_prefill_token_threshold=6,
                    max_num_batched_tokens=16),
}


@pytest.mark.parametrize("simulate", [False, True], ids=["bard", "simulated"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_with_caching_every_request_equals_its_solo_run_without(name, simulate):
    llm = LLM(None, device="cpu", simulate=simulate, block_size=4, max_num_seqs=6, enable_prefix_caching=True,
              check_kv_invariants=True, **CONFIGS[name])
    # Twice over, in one batch: the second round arrives after the first and hits its blocks.
    outputs = llm.generate(PROMPTS + PROMPTS, GREEDY, use_tqdm=False)
    assert_solo_equal(outputs, PROMPTS + PROMPTS, simulate)
    assert sum(o.num_cached_tokens for o in outputs) > 0
    assert (sum(o.metrics.num_preemptions for o in outputs) > 0) == (name != "roomy")


@pytest.mark.parametrize("simulate", [False, True], ids=["bard", "simulated"])
def test_a_hit_is_not_prefilled_again(simulate):
    llm = LLM(None, device="cpu", simulate=simulate, block_size=4, num_blocks=256, enable_prefix_caching=True,
              check_kv_invariants=True)
    first = llm.generate([BASE + [101]], GREEDY, use_tqdm=False)[0]
    steps_before = llm.engine.trace.num_steps
    later = [BASE[:13] + [9, 9], BASE, BASE[:3] + [5], BASE + [101]]
    outputs = llm.generate(later, GREEDY, use_tqdm=False)
    assert first.num_cached_tokens == 0
    # Full blocks only, and never the last prompt token: 12 of 15, 20 of 23 (not 23), none of 4, 20 of 24.
    assert [o.num_cached_tokens for o in outputs] == [12, 20, 0, 20]
    steps = llm.engine.trace.steps[steps_before:]
    assert sum(s.prefill_tokens for s in steps) == sum(map(len, later)) - 52
    assert sum(s.cached_tokens for s in steps) == 52
    stats = summarize(outputs, llm.engine.trace)
    assert stats["prefix_cache_hit_rate"] == pytest.approx(52 / sum(map(len, later)))
    assert_solo_equal(outputs, later, simulate)


@pytest.mark.parametrize("simulate", [False, True], ids=["bard", "simulated"])
def test_a_block_overwritten_after_eviction_is_never_a_hit(simulate):
    """A's blocks are cached, evicted and reused by B with other tokens; a request with A's prompt must
    miss what was overwritten, and still equal its solo run."""
    prompt_a, prompt_b = BASE[:17], OTHER
    llm = LLM(None, device="cpu", simulate=simulate, block_size=4, num_blocks=10, enable_prefix_caching=True,
              check_kv_invariants=True)
    once = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    llm.generate([prompt_a], once, use_tqdm=False)
    kv = llm.engine.scheduler.kv
    a_hashes = block_hashes(prompt_a, 4)
    assert all(h in kv.cached for h in a_hashes)
    # B needs 9 of the 10 blocks: 6 unnamed ones, then A's 3 least recently used (its deepest) are evicted.
    llm.generate([prompt_b], once, use_tqdm=False)
    assert a_hashes[0] in kv.cached and not any(h in kv.cached for h in a_hashes[1:])
    again = llm.generate([prompt_a], GREEDY, use_tqdm=False)[0]
    assert again.num_cached_tokens == 4
    assert_solo_equal([again], [prompt_a], simulate)


def test_the_engine_catches_an_eviction_that_keeps_the_name(monkeypatch):
    """Plant the bug the regression above guards against: the invariants stop the run at once."""
    def evict_keeping_names(self, needed):
        while len(self.free_blocks) < needed and self.evictable:
            self.free_blocks.append(self.evictable.popitem(last=False)[0])

    monkeypatch.setattr(BlockManager, "_evict", evict_keeping_names)
    llm = LLM(None, device="cpu", simulate=True, block_size=4, num_blocks=10, enable_prefix_caching=True,
              check_kv_invariants=True)
    once = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    llm.generate([BASE[:17]], once, use_tqdm=False)
    with pytest.raises(AssertionError, match="disagree|prefix hash"):
        llm.generate([OTHER], once, use_tqdm=False)


def test_the_engine_runs_the_lookup_it_was_given_and_the_course_checks_it():
    calls = []

    def counting(hashes, cached):
        calls.append(len(hashes))
        return longest_cached_prefix(hashes, cached)

    llm = LLM(None, device="cpu", simulate=True, block_size=4, enable_prefix_caching=True,
              parts=EngineParts(longest_cached_prefix=counting))
    llm.generate([BASE, BASE], GREEDY, use_tqdm=False)
    assert calls and calls[0] == (len(BASE) - 1) // 4
    overcounting = LLM(None, device="cpu", simulate=True, block_size=4, enable_prefix_caching=True,
                       parts=checked(longest_cached_prefix=lambda hashes, cached: len(hashes)))
    with pytest.raises(ValueError, match="longest_cached_prefix gave 5 for 5 hashes"):
        overcounting.generate([BASE], GREEDY, use_tqdm=False)


def test_waiting_requests_whose_hits_hold_every_cached_block_still_start():
    """The soak's case (make soak, 2026-12-02): with block_size 1 the two waiting requests' hits together
    held every evictable block. Had every looked-up hit been kept from eviction, neither could take the one
    new block it needs, and the run stopped. Only the hits of the requests that start are kept; a start's
    hit blocks count among the blocks it takes (BlockManager.blocks_to_start)."""
    llm = LLM(None, device="cpu", simulate=True, block_size=1, num_blocks=32, max_num_seqs=4,
              max_num_batched_tokens=48, enable_prefix_caching=True, check_kv_invariants=True)
    engine, ids, lengths = llm.engine, [], {}
    for step in range(400):
        if step in (0, 5):
            for prompt, max_tokens in ([([1], 1), ([1], 1), ([1] * 9, 20)] if step == 0 else [([1], 13)]):
                ids.append(engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=max_tokens,
                                                                     ignore_eos=True)))
        lengths.update((o.request_id, len(o.outputs[0].token_ids)) for o in engine.step() if o.finished)
        if step > 5 and not engine.has_unfinished_requests():
            break
    assert not engine.has_unfinished_requests(), "requests are stuck"
    assert [lengths[i] for i in ids] == [1, 1, 20, 13], "a request came back short"
