"""Lesson 04: the paged KV cache. The pool is num_blocks blocks of block_size token slots; a
sequence's block table lists its blocks in order, and token p of the sequence lives in slot
p % block_size of block table[p // block_size].

Task 1  PagedAllocator: can_allocate, allocate, can_append, append_slots, free
                                   pytest tests/exercises -k lesson04_task1
        (one pair of methods alone: -k lesson04_task1_allocate, _append or _free; all five together:
        -k lesson04_task1_allocator)
Task 2  size_kv_pool (a design task)   pytest tests/exercises -k lesson04_task2
Task 3  plan_step, grown: edit yours in exercises/lesson02_continuous.py
                                   pytest tests/exercises -k lesson04_task3
        A newcomer now also needs KV blocks. state.free_blocks is what the pool can hand out now;
        state.blocks_to_grow(request_id, n) is what a running request needs for n more tokens, and
        state.blocks_to_start(request_id, n) what a newcomer needs for its first n. The running requests'
        new blocks come first (in this lesson's tests they always fit). Then the newcomers start, first come,
        first served, as many as the seats, the budget and the blocks left take. Lesson 02's rules still
        hold, your choice among them: one that cannot start (now also for want of blocks) may be passed over.

The engine builds its BlockManager (minicb/kv/block_manager.py) over your class: the BlockManager
decides how much to reserve, does the swapping of lesson 06 and the prefix sharing of lesson 10 on
the state your __init__ sets, so keep that state as it is. The tests grade your methods a pair at a time
(allocate, append, free: the rest are then minicb's, run on your instance), and then all of them
together: on random sequences of calls, tables that share blocks included, each result checked against
its contract and against minicb's, and in the engine under memory pressure, with the pool's invariants
checked after every step.
minicb's own is PagedAllocator in minicb/kv/paged_allocator.py: write the methods yourself, since a
method that calls or inherits minicb's fails its task.
"""
from __future__ import annotations

from collections import deque

from minicb.kv.block_manager import NoFreeBlocks  # noqa: F401  (raise it when the pool is too small)
from minicb.course.pool_sizing import PoolProblem


class PagedAllocator:
    def __init__(self, num_blocks: int, block_size: int, num_swap_blocks: int = 0):
        """The state, given (every method reads and updates exactly this):

        free_blocks       the free device block ids; blocks are taken from the left and given back on the right
        ref_counts[b]     the number of sequences whose table holds block b: 0 while b is free. In this lesson
                          every block has one holder at most; with prefix caching (lesson 10) a prompt's
                          cached first blocks are shared, and BlockManager.allocate starts a new table with
                          blocks other tables hold, adding 1 to each. The same rule holds in both.
        tables[s]         sequence s's device blocks, in order (only for sequences on the device)
        num_tokens[s]     how many tokens s holds slots for (also while s is swapped out)
        free_swap_blocks  the free blocks of the CPU swap pool (lesson 06)
        swapped[s]        a swapped-out sequence's CPU blocks; it then has no entry in tables
        """
        self.num_blocks, self.block_size, self.num_swap_blocks = num_blocks, block_size, num_swap_blocks
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.ref_counts = [0] * num_blocks
        self.tables: dict[str, list[int]] = {}
        self.num_tokens: dict[str, int] = {}
        self.free_swap_blocks: deque[int] = deque(range(num_swap_blocks))
        self.swapped: dict[str, list[int]] = {}

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        """Admission asks this before it starts a request: does a new sequence fit, with keep_free blocks
        left over for the running sequences to grow into?

        Reads the state; changes nothing. The contract: True exactly when allocate(_, num_tokens,
        reserve_tokens) would succeed and leave at least keep_free blocks free. keep_free may be below 0:
        the BlockManager can evict that many cached blocks first, so the answer is then True when allocate
        would be short by at most -keep_free blocks."""
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.can_allocate: whether a new sequence fits. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """A new sequence's first blocks: room for its num_tokens tokens, and for reserve_tokens if more
        (room to grow into, which static batching and contiguous reservation ask for). Paging's point
        is that memory follows the tokens, so it takes no more than that.

        Reads and updates the state. The contract, after allocate returns a table:
        - the table is tables[seq_id], and the fewest blocks with a slot for each of
          max(num_tokens, reserve_tokens) tokens (a block holds block_size);
        - its blocks are the ones at the left of free_blocks, in that order, and have left it; each one's
          ref count counts seq_id as its holder;
        - num_tokens[seq_id] is num_tokens (the tokens, not the reserve); no other sequence changes.
        It refuses, changing nothing: ValueError if seq_id holds blocks already (on the device, or
        swapped out); NoFreeBlocks if too few blocks are free.
        """
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.allocate: blocks for a new sequence. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        """The scheduler asks this before it runs num_new_tokens more tokens of a running sequence: can
        its table hold them, with keep_free blocks left over? When it cannot, someone must give way.

        Reads the state; changes nothing. The contract: True exactly when append_slots(seq_id,
        num_new_tokens) would succeed and leave at least keep_free blocks free (below 0, as for
        can_allocate: short by at most -keep_free blocks)."""
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.can_append: whether a sequence can grow. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        """Room for num_new_tokens more tokens of seq_id, which holds a table; returns its table.

        Reads and updates the state. The contract, after it returns:
        - num_tokens[seq_id] has grown by num_new_tokens, and the table has a slot for each of them;
        - the blocks the table had stay, in place (they hold the sequence's K/V, and the first ones may
          be shared with other tables, lesson 10);
        - it has gained a block only where the tokens would not fit without it: never while its last
          block has a free slot (a table reserved ahead may take none for many tokens);
        - a block it gains is the one at the left of free_blocks, goes on the end of the table, has left
          free_blocks, and its ref count counts seq_id; no other sequence changes.
        It refuses, changing nothing (table and num_tokens as they were): NoFreeBlocks if too few
        blocks are free.
        """
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.append_slots: a new block only when the "
                                  "last one is full. Check it with: pytest tests/exercises -k lesson04_task1")

    def free(self, seq_id: str) -> None:
        """A sequence is done with its blocks (it finished, was aborted, or gives way to be recomputed
        later): it gives back what it holds, and nothing that another sequence still holds.

        Reads and updates the state. The contract, after it returns:
        - seq_id is forgotten: no entry in tables, swapped or num_tokens;
        - on the device, each block of its table has one holder fewer in ref_counts, and goes back on
          the right of free_blocks (in table order) exactly when no sequence holds it any more. A block
          that another table holds too (a shared prefix, lesson 10) stays where it is, off the free
          list: giving it back would hand out slots that sequence still reads;
        - swapped out (lesson 06: it has no table, its KV sits in swapped[seq_id]), its CPU blocks go
          back on the right of free_swap_blocks, in order; the engine frees a swapped sequence when
          its request is aborted;
        - no other sequence's table, count or blocks change.
        It refuses, changing nothing: KeyError if seq_id holds no blocks, on the device or swapped out (it was
        freed already, or never allocated): a second free of one sequence is a bug upstream, and must not pass
        unnoticed.
        """
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.free: give every block back, on the device "
                                  "or in the swap pool. Check it with: pytest tests/exercises -k lesson04_task1")


def size_kv_pool(problem: PoolProblem) -> tuple[int, int]:
    """A KV pool of your design for problem.workload(seed): return (block_size, num_blocks).

    What a server operator decides before the first request: how the device's KV memory is cut into
    blocks, and how much of it the pool takes. You may read the problem (its workload for any seed, its
    seats, lengths and budget) and run pools on the simulator: minicb.course.pool_sizing.run_pool(block_size,
    num_blocks, seed, problem) reports one run's waste, preemptions and peak.

    The contract (each rule is checked by a test, rule 1 first):
    1. block_size is one of problem.block_sizes; num_blocks is an int; the pool, block_size * num_blocks
       slots, fits the device's problem.budget_slots and holds one request of problem.max_model_len.
    2. Waste: over the graded runs, at most minicb.course.pool_sizing.MAX_WASTE (30%) of the slots the
       sequences hold hold no token.
    3. Preemptions: over the graded runs, at most MAX_PREEMPTIONS_PER_REQUEST (2 per 100 requests).
    4. Memory: the pool takes at most MEMORY_SHARE (125%) of the slots of the reference answer's pool.
    5. Block overhead: each block a step reads costs about BLOCK_OVERHEAD_TOKENS (4) tokens' reading more;
       over the graded runs this adds at most MAX_BLOCK_OVERHEAD (a third) to the tokens read
       (pool_sizing.block_overhead; run_pool's report shows it).
    The graded runs are workloads from seeds you have not seen, drawn as problem.workload draws them;
    problem.practice_seeds are three such workloads to design on, and any other seed draws another.
    """
    raise NotImplementedError("Lesson 04, task 2: size_kv_pool: a block size and a pool size for a workload. "
                              "Check it with: pytest tests/exercises -k lesson04_task2")
