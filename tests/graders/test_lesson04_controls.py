"""Negative controls for lesson 04's graders: each is minicb's PagedAllocator with one plausible mistake,
and each must fail the grader of its task with the rule it breaks, by name. They run on no learner code."""
from __future__ import annotations

import pytest

from minicb.kv.paged_allocator import NoFreeBlocks, PagedAllocator, blocks_for

from test_lesson04_paged_kv import (ENGINES, WHOLE, check_allocate_contract, check_append_contract, check_contract,
                                    check_free_contract, graded, serve_and_check, serve_with_prefix_caching)

# --- task 1, can_allocate and allocate ---------------------------------------------------------------


class IgnoresKeepFree(PagedAllocator):
    """can_allocate that asks only whether the blocks are there, not whether keep_free stay free."""

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        return super().can_allocate(num_tokens, reserve_tokens)


class ClampsKeepFreeAtZero(PagedAllocator):
    """can_allocate that takes a keep_free below 0 for a slip and counts it as 0."""

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        return super().can_allocate(num_tokens, reserve_tokens, max(0, keep_free))


class OneBlockTooMany(PagedAllocator):
    """allocate that counts blocks as num_tokens // block_size + 1: one too many when they fill it exactly."""

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        return super().allocate(seq_id, num_tokens, max(reserve_tokens, num_tokens + 1))


class TakesFromTheRight(PagedAllocator):
    """allocate that takes the blocks from the right of the free list, where free gives them back."""

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        self.free_blocks.reverse()
        try:
            return super().allocate(seq_id, num_tokens, reserve_tokens)
        finally:
            self.free_blocks.reverse()


class ABlockForAnEmptySequence(PagedAllocator):
    """allocate that gives every new sequence at least one block, one of 0 tokens (a prefix hit's start) too."""

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        return super().allocate(seq_id, num_tokens, max(reserve_tokens, 1))


class TakesUntilTheFreeListRunsOut(PagedAllocator):
    """allocate that takes blocks one by one and refuses when the free list runs dry, keeping what it took."""

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        needed = blocks_for(max(num_tokens, reserve_tokens), self.block_size)
        if seq_id not in self.tables and seq_id not in self.swapped and needed > len(self.free_blocks):
            self.free_blocks.clear()
            raise NoFreeBlocks(f"{seq_id!r} ran out of blocks")
        return super().allocate(seq_id, num_tokens, reserve_tokens)


@pytest.mark.parametrize("mistake,rule", [
    (IgnoresKeepFree, "can_allocate is True exactly when allocate would succeed and leave keep_free="),
    (ClampsKeepFreeAtZero, r"can_allocate is True exactly when allocate would succeed and leave keep_free=-\d blocks "
                           r"free \(below 0: when it would be short by at most -keep_free blocks\)"),
    (OneBlockTooMany, "the table is the fewest blocks that hold"),
    (TakesFromTheRight, "its blocks are the ones at the left of free_blocks"),
    (ABlockForAnEmptySequence, "the table is the fewest blocks that hold 0 tokens"),
    (TakesUntilTheFreeListRunsOut, "a refused allocate changes nothing"),
])
def test_allocate_contract_fails_a_plausible_mistake_by_its_rule(mistake, rule):
    with pytest.raises(AssertionError, match=rule):
        check_allocate_contract(mistake)


# --- task 1, can_append and append_slots -------------------------------------------------------------


class AppendsBeforeFull(PagedAllocator):
    """append_slots that opens a new block as soon as the last one fills, before a token needs it."""

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        table = super().append_slots(seq_id, num_new_tokens + 1)
        self.num_tokens[seq_id] -= 1
        return table


class CanAppendIgnoresKeepFree(PagedAllocator):
    """can_append that asks only whether the new blocks are there."""

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        return super().can_append(seq_id, num_new_tokens)


class CanAppendForgetsTheRoomLeft(PagedAllocator):
    """can_append that sizes the new tokens as if they started a table, blind to the last block's free slots."""

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        return self.can_allocate(num_new_tokens, keep_free=keep_free)


class CountsTheReserveAsCredit(PagedAllocator):
    """can_append that counts the blocks a table holds beyond its tokens (reserved ahead) as if they were free."""

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        needed = blocks_for(self.num_tokens[seq_id] + num_new_tokens, self.block_size) - len(self.tables[seq_id])
        return needed + keep_free <= len(self.free_blocks)


class OneBlockPerCall(PagedAllocator):
    """append_slots that adds a block when the last one is full, one, however many tokens come."""

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        table = self.tables[seq_id]
        if self.num_tokens[seq_id] + num_new_tokens > len(table) * self.block_size:
            if not self.free_blocks:
                raise NoFreeBlocks(f"{seq_id!r} needs a block")
            table.append(self.free_blocks.popleft())
            self.ref_counts[table[-1]] += 1
        self.num_tokens[seq_id] += num_new_tokens
        return table


@pytest.mark.parametrize("mistake,rule", [
    (AppendsBeforeFull, "a new block only when the last one is full"),
    (CanAppendIgnoresKeepFree, "can_append is True exactly when append_slots would succeed and leave keep_free="),
    (CanAppendForgetsTheRoomLeft, "can_append is True exactly when append_slots would succeed"),
    (CountsTheReserveAsCredit, "can_append is True exactly when append_slots would succeed and leave keep_free=1"),
    (OneBlockPerCall, "the table has a slot for each of its"),
])
def test_append_contract_fails_a_plausible_mistake_by_its_rule(mistake, rule):
    with pytest.raises(AssertionError, match=rule):
        check_append_contract(mistake)


# --- task 1, free --------------------------------------------------------------------------------


class ReturnsSharedBlocks(PagedAllocator):
    """free that counts the holders down right, and then gives every block of the table back, held or not."""

    def free(self, seq_id: str) -> None:
        still_held = [block for block in self.tables.get(seq_id, []) if self.ref_counts[block] > 1]
        super().free(seq_id)
        self.free_blocks.extend(still_held)


class ZeroesTheCount(PagedAllocator):
    """free as "every block goes back with ref count 0" reads, literally: blind to other holders."""

    def free(self, seq_id: str) -> None:
        for block in self.tables.get(seq_id, []):
            self.ref_counts[block] = 1
        super().free(seq_id)


class ForgetsTheSwapPool(PagedAllocator):
    """free that gives back a device table and nothing else: a swapped sequence leaks its CPU blocks."""

    def free(self, seq_id: str) -> None:
        if seq_id in self.swapped:
            del self.num_tokens[seq_id]
            return
        super().free(seq_id)


class GivesBackInReverse(PagedAllocator):
    """free that gives the table back from its end, as a stack would."""

    def free(self, seq_id: str) -> None:
        if seq_id in self.tables:
            self.tables[seq_id].reverse()
        super().free(seq_id)


class ForgivesASecondFree(PagedAllocator):
    """free that lets a sequence holding nothing pass: a double free upstream goes unnoticed."""

    def free(self, seq_id: str) -> None:
        if seq_id in self.num_tokens:
            super().free(seq_id)


class PopsWithDefaults(PagedAllocator):
    """free written defensively, every lookup with a default: the same silence, by another road."""

    def free(self, seq_id: str) -> None:
        self.free_swap_blocks.extend(self.swapped.pop(seq_id, []))
        for block in self.tables.pop(seq_id, []):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        self.num_tokens.pop(seq_id, None)


@pytest.mark.parametrize("mistake,rule", [
    (ReturnsSharedBlocks, r"free gives a block back only when no sequence holds it any more: free\('.'\) put block "
                          r"\d+ on the free list while '.'( and '.')* still holds? it: it would be returned twice"),
    (ZeroesTheCount, "free takes one holder off each block of the table"),
    (ForgetsTheSwapPool, "free forgets the sequence: no entry in tables, swapped or num_tokens"),
    (GivesBackInReverse, "free puts each block no one holds any more back on the right of free_blocks, in table "
                         "order"),
    (ForgivesASecondFree, r"free refuses a sequence that holds no blocks with KeyError, changing nothing: "
                          r"free\('.'\) returned, and a second free would go unnoticed"),
    (PopsWithDefaults, "free refuses a sequence that holds no blocks with KeyError"),
])
def test_free_contract_fails_a_plausible_mistake_by_its_rule(mistake, rule):
    with pytest.raises(AssertionError, match=rule):
        check_free_contract(mistake)


# --- the whole allocator's check fails each part's mistake, by the same rule -----------------------------

@pytest.mark.parametrize("mistake,rule", [
    (TakesFromTheRight, "its blocks are the ones at the left of free_blocks"),
    (CanAppendForgetsTheRoomLeft, "can_append is True exactly when append_slots would succeed"),
    (ReturnsSharedBlocks, "free gives a block back only when no sequence holds it any more"),
])
def test_the_whole_allocator_contract_fails_each_parts_mistake_by_its_rule(mistake, rule):
    with pytest.raises(AssertionError, match=rule):
        check_contract(WHOLE, mistake)


# --- the engine checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("mistake,part,rule", [
    (ReturnsSharedBlocks, "free", "returned twice: it is in the prefix cache's LRU while '.' still holds it"),
    (ZeroesTheCount, "free",
     r"returned twice: it is in the prefix cache's LRU while '.' still holds it \(ref count 0\)"),
    (AppendsBeforeFull, "append",
     "the engine runs on your methods without an error: at step \\d+ it raised NoFreeBlocks"),
])
def test_the_engine_with_prefix_caching_fails_a_mistake_by_what_it_did(mistake, part, rule):
    with pytest.raises(AssertionError, match=rule):
        serve_with_prefix_caching(graded(part, mistake))


def test_the_engine_with_swapping_fails_a_free_that_forgets_the_swap_pool():
    with pytest.raises(AssertionError, match="does free give a swapped sequence's CPU blocks back"):
        serve_and_check(graded("free", ForgetsTheSwapPool), **ENGINES["swap"])
