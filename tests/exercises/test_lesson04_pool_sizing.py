"""Lesson 04's design task (task 2), graded on the implementation MINICB_IMPL picks (make test: the solutions).

Your pool serves held-out workloads (held_out.py), which neither the notebook nor the practice seeds show, on the engine
over your lesson's allocator (course.parts(): minicb's methods in place of those still stubs). Rule 4's bar is
the reference answer's pool, the reference's own design run here on the same engine, once per process. Each
check takes the answer it grades, so tests/graders/ can show that plausible mistakes fail.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import held_out
from grading import reference_lesson

from minicb import course
from minicb.course.pool_sizing import (BLOCK_OVERHEAD_TOKENS, MAX_BLOCK_OVERHEAD, MAX_PREEMPTIONS_PER_REQUEST,
                                       MAX_WASTE, MEMORY_SHARE, PoolProblem, PoolReport, answer_error, block_overhead,
                                       preemptions_per_request, run_pool, total_waste)

mine = course.lesson("lesson04_paged_kv")


def reference():
    return reference_lesson("lesson04_paged_kv")


PROBLEM = PoolProblem()


@functools.cache
def answer_of(size_kv_pool: Callable[[PoolProblem], object]) -> object:
    answer = size_kv_pool(PROBLEM)
    return tuple(answer) if isinstance(answer, list) else answer


@functools.cache
def graded_run(answer: tuple[int, int], seed: int) -> PoolReport:
    return run_pool(*answer, seed, PROBLEM)


@functools.cache
def reference_slots() -> int:
    block_size, num_blocks = answer_of(reference().size_kv_pool)
    return block_size * num_blocks


def check_pool_is_valid(answer: object) -> tuple[int, int]:
    error = answer_error(answer, PROBLEM)
    assert error is None, f"rule 1: {error}"
    return answer


def check_little_waste(answer: object) -> float:
    block_size, _ = check_pool_is_valid(answer)
    waste = total_waste([graded_run(answer, seed) for seed in held_out.POOL_SIZING])
    assert waste <= MAX_WASTE, (
        f"rule 2: at most {MAX_WASTE:.0%} of the slots the sequences hold may hold no token; with blocks of "
        f"{block_size} tokens, {waste:.0%} of them held none over the {len(held_out.POOL_SIZING)} unseen workloads "
        "(internal fragmentation: the unfilled end of each sequence's last block)")
    return waste


def check_little_block_overhead(answer: object) -> float:
    block_size, _ = check_pool_is_valid(answer)
    overhead = block_overhead([graded_run(answer, seed) for seed in held_out.POOL_SIZING])
    assert overhead <= MAX_BLOCK_OVERHEAD, (
        f"rule 5: reading the blocks may add at most {MAX_BLOCK_OVERHEAD:.0%} to the cost of reading the tokens (a "
        f"block costs about {BLOCK_OVERHEAD_TOKENS} tokens' reading); with blocks of {block_size} tokens it added "
        f"{overhead:.0%} over the {len(held_out.POOL_SIZING)} unseen workloads: small blocks, many blocks per token")
    return overhead


def check_few_preemptions(answer: object) -> float:
    """The runs stop once the preemptions already break the rule: the rest cannot bring it back."""
    block_size, num_blocks = check_pool_is_valid(answer)
    allowed = MAX_PREEMPTIONS_PER_REQUEST * PROBLEM.n * len(held_out.POOL_SIZING)
    reports = []
    for seed in held_out.POOL_SIZING:
        reports.append(graded_run(answer, seed))
        if sum(r.preemptions for r in reports) > allowed:
            break
    preemptions = sum(r.preemptions for r in reports)
    assert preemptions <= allowed, (
        f"rule 3: at most {MAX_PREEMPTIONS_PER_REQUEST * 100:.0f} preemptions per 100 requests on the unseen "
        f"workloads; your pool of {block_size * num_blocks:,} slots preempted {preemptions} times in "
        f"{len(reports)} of them ({preemptions_per_request(reports) * 100:.0f} per 100 requests): their peaks are "
        "higher than it holds")
    return preemptions_per_request(reports)


def check_memory(answer: object) -> float:
    block_size, num_blocks = check_pool_is_valid(answer)
    share = block_size * num_blocks / reference_slots()
    assert share <= MEMORY_SHARE, (
        f"rule 4: the pool may take at most {MEMORY_SHARE:.0%} of the slots the reference's pool takes; yours "
        f"takes {block_size * num_blocks:,}, {share:.0%} of it: memory the workload never fills serves nobody")
    return share


def test_lesson04_task2_the_answer_is_a_pool_the_device_holds():
    check_pool_is_valid(answer_of(mine.size_kv_pool))


def test_lesson04_task2_little_waste_on_unseen_workloads(record_property):
    waste = check_little_waste(answer_of(mine.size_kv_pool))
    record_property("margin", f"{waste:.1%} of the held slots empty (at most {MAX_WASTE:.0%})")


def test_lesson04_task2_few_preemptions_on_unseen_workloads(record_property):
    per_request = check_few_preemptions(answer_of(mine.size_kv_pool))
    record_property("margin", f"{per_request * 100:.2f} preemptions per 100 requests (at most "
                              f"{MAX_PREEMPTIONS_PER_REQUEST * 100:.0f})")


def test_lesson04_task2_no_more_memory_than_the_workload_needs(record_property):
    share = check_memory(answer_of(mine.size_kv_pool))
    record_property("margin", f"the pool takes {share:.0%} of the reference's slots (at most {MEMORY_SHARE:.0%})")


def test_lesson04_task2_little_block_overhead_on_unseen_workloads(record_property):
    overhead = check_little_block_overhead(answer_of(mine.size_kv_pool))
    record_property("margin", f"reading the blocks added {overhead:.0%} (at most {MAX_BLOCK_OVERHEAD:.0%})")
