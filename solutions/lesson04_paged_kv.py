"""Lesson 04, the reference: minicb's own allocator, PagedAllocator in minicb/kv/paged_allocator.py (its
free also handles the swap pool of lesson 06), and an answer to the design task."""
import math

from minicb.course.pool_sizing import MAX_BLOCK_OVERHEAD, MAX_WASTE, PoolProblem, run_pool
from minicb.kv.paged_allocator import PagedAllocator

__all__ = ["PagedAllocator", "size_kv_pool"]

HEADROOM = 1.25   # the practice seeds' highest peak, and a quarter more: a heavy tail has higher peaks unseen


def size_kv_pool(problem: PoolProblem) -> tuple[int, int]:
    """The smallest block size whose practice runs keep both the waste and the block overhead within their
    bounds, and a pool with headroom over the most those runs held at once on a pool that never ran dry."""
    for block_size in sorted(problem.block_sizes):
        ample = problem.budget_slots // block_size
        runs = [run_pool(block_size, ample, seed, problem) for seed in problem.practice_seeds]
        if all(r.waste <= MAX_WASTE and r.block_overhead <= MAX_BLOCK_OVERHEAD for r in runs):
            return block_size, math.ceil(HEADROOM * max(r.peak_slots for r in runs) / block_size)
    raise ValueError("no block size keeps both the waste and the block overhead within bounds")
