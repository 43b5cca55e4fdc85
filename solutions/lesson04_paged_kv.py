"""Lesson 04, the reference: minicb's own allocator, PagedAllocator in minicb/kv/paged_allocator.py (its
free also handles the swap pool of lesson 06), and an answer to the design task."""
import math

from minicb.course.pool_sizing import PoolProblem, run_pool
from minicb.kv.paged_allocator import PagedAllocator

__all__ = ["PagedAllocator", "size_kv_pool"]

HEADROOM = 1.25   # the practice seeds' highest peak, and a quarter more: a heavy tail has higher peaks unseen


def size_kv_pool(problem: PoolProblem) -> tuple[int, int]:
    """The smallest block size (a sequence leaves at most one block partly empty), and a pool with headroom
    over the most the practice workloads held at once on a pool that never ran dry."""
    block_size = min(problem.block_sizes)
    ample = problem.budget_slots // block_size
    peak = max(run_pool(block_size, ample, seed, problem).peak_slots for seed in problem.practice_seeds)
    return block_size, math.ceil(HEADROOM * peak / block_size)
