"""Lesson 04's design grader catches plausible designs that miss: each pool below must fail the rule it breaks.
Each is a learner's reasoning gone wrong in one place, most built on the reference's own answer."""
from __future__ import annotations

import pytest
from test_lesson04_pool_sizing import (check_few_preemptions, check_little_block_overhead, check_little_waste,
                                      check_memory, check_pool_is_valid)

from minicb.course.pool_sizing import PoolProblem
from solutions.lesson04_paged_kv import size_kv_pool

PROBLEM = PoolProblem()


def fewer_larger_blocks(problem):
    """The reference's memory, cut into the largest blocks: fewer allocations, as if that were the cost."""
    block_size, num_blocks = size_kv_pool(problem)
    largest = max(problem.block_sizes)
    return largest, block_size * num_blocks // largest


def the_smallest_blocks(problem):
    """The reference's memory, cut into the smallest blocks: the least waste, as if waste were the only cost."""
    block_size, num_blocks = size_kv_pool(problem)
    smallest = min(problem.block_sizes)
    return smallest, block_size * num_blocks // smallest


def the_whole_budget(problem):
    """Never preempt: every slot the device has."""
    block_size = min(problem.block_sizes)
    return block_size, problem.budget_slots // block_size


def just_one_request(problem):
    """Rule 1 asks for one request of max_model_len: no more, since blocks come back when requests finish."""
    block_size = min(problem.block_sizes)
    return block_size, -(-problem.max_model_len // block_size)


def half_the_peak(problem):
    """Preemption is cheap on the simulator: half the reference's pool, let the rest wait."""
    block_size, num_blocks = size_kv_pool(problem)
    return block_size, num_blocks // 2


def blocks_from_a_division(problem):
    """The budget's share, computed with / : a float number of blocks."""
    block_size = 16
    return block_size, problem.budget_slots / 4 / block_size


def test_the_largest_blocks_fail_on_waste():
    with pytest.raises(AssertionError, match="rule 2: at most 30% of the slots the sequences hold may hold no token"):
        check_little_waste(fewer_larger_blocks(PROBLEM))


def test_the_smallest_blocks_fail_on_block_overhead():
    with pytest.raises(AssertionError, match="rule 5: reading the blocks may add at most 33%"):
        check_little_block_overhead(the_smallest_blocks(PROBLEM))


def test_the_reference_picks_neither_extreme():
    block_size, _ = size_kv_pool(PROBLEM)
    assert min(PROBLEM.block_sizes) < block_size < max(PROBLEM.block_sizes)


@pytest.mark.parametrize("design", [just_one_request, half_the_peak])
def test_a_pool_below_the_unseen_peaks_fails_on_preemptions(design):
    with pytest.raises(AssertionError, match="rule 3: at most 2 preemptions per 100 requests"):
        check_few_preemptions(design(PROBLEM))


def test_the_whole_budget_fails_on_memory():
    with pytest.raises(AssertionError, match="rule 4: the pool may take at most 125% of the slots"):
        check_memory(the_whole_budget(PROBLEM))


def test_a_float_number_of_blocks_is_refused_by_name():
    with pytest.raises(AssertionError, match="rule 1: the number of blocks must be an int"):
        check_pool_is_valid(blocks_from_a_division(PROBLEM))


def test_the_controls_keep_the_rules_they_are_not_about():
    """So that each fails for the reason its test names. (The largest blocks also preempt: the slots they
    waste are slots the growing sequences lack.)"""
    check_memory(fewer_larger_blocks(PROBLEM))
    check_little_block_overhead(fewer_larger_blocks(PROBLEM))
    check_little_waste(the_smallest_blocks(PROBLEM))
    check_memory(the_smallest_blocks(PROBLEM))
    check_little_waste(the_whole_budget(PROBLEM))
    check_few_preemptions(the_whole_budget(PROBLEM))
    check_memory(just_one_request(PROBLEM))
    check_little_waste(half_the_peak(PROBLEM))
