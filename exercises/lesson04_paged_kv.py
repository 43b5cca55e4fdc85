"""Lesson 04: the paged KV cache. The pool is num_blocks blocks of block_size token slots; a
sequence's block table lists its blocks in order, and token p of the sequence lives in slot
p % block_size of block table[p // block_size].

Task 1  PagedAllocator.can_allocate, .allocate       pytest tests/exercises -k lesson04_task1
Task 2  PagedAllocator.can_append, .append_slots     pytest tests/exercises -k lesson04_task2
Task 3  PagedAllocator.free                          pytest tests/exercises -k lesson04_task3

The engine builds its BlockManager (minicb/block_manager.py) over your class: the BlockManager
decides how much to reserve and does the swapping of lesson 06 on the state your __init__ sets, so
keep that state as it is. The tests grade each task with only that task's methods yours (the rest
are minicb's, run on your instance) and check the pool's invariants after every engine step.
minicb's own is PagedAllocator in minicb/block_manager.py: write the methods yourself, since a
method that calls or inherits minicb's fails its task.
"""
from __future__ import annotations

from collections import deque

from minicb.block_manager import NoFreeBlocks  # noqa: F401  (raise it when the pool is too small)


class PagedAllocator:
    def __init__(self, num_blocks: int, block_size: int, num_swap_blocks: int = 0):
        """The state, given (every method reads and updates exactly this):

        free_blocks       the free device block ids; take from the left (popleft), give back on the right
        ref_counts[b]     1 while a sequence holds block b, 0 while b is free
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
        """Whether allocate(_, num_tokens, reserve_tokens) would succeed with keep_free blocks still
        free afterwards: ceil(max(num_tokens, reserve_tokens) / block_size) + keep_free <= free blocks.
        Changes nothing."""
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.can_allocate: whether a new sequence fits. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """Start seq_id's block table and return it.

        - it gets ceil(max(num_tokens, reserve_tokens) / block_size) blocks (reserve_tokens: room to
          grow into, which static batching and contiguous reservation ask for), taken from the left
          of free_blocks, in that order; each one's ref count becomes 1;
        - tables[seq_id] is the table; num_tokens[seq_id] = num_tokens (the tokens, not the reserve);
        - ValueError if seq_id already has blocks, on the device (tables) or swapped out (swapped);
        - NoFreeBlocks if too few blocks are free; then nothing changes (a failed allocate takes none).
        """
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.allocate: blocks for a new sequence. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        """Whether append_slots(seq_id, num_new_tokens) would succeed with keep_free blocks still free
        afterwards: the blocks it must add (0 while its table has room) + keep_free <= free blocks.
        Changes nothing."""
        raise NotImplementedError("Lesson 04, task 2: PagedAllocator.can_append: whether a sequence can grow. "
                                  "Check it with: pytest tests/exercises -k lesson04_task2")

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        """Make room for num_new_tokens more tokens of seq_id and return its table.

        - num_tokens[seq_id] grows by num_new_tokens;
        - the table gains blocks only while it cannot hold num_tokens[seq_id] tokens: a new block only
          when the last one is full (4 tokens in a 4-slot block need none, the 5th needs one; a table
          reserved ahead may need none for many tokens). New blocks come from the left of free_blocks,
          go on the end of the table, and get ref count 1;
        - NoFreeBlocks if too few blocks are free; then nothing changes (table and num_tokens as before).
        """
        raise NotImplementedError("Lesson 04, task 2: PagedAllocator.append_slots: a new block only when the "
                                  "last one is full. Check it with: pytest tests/exercises -k lesson04_task2")

    def free(self, seq_id: str) -> None:
        """Give back everything seq_id holds and forget it everywhere.

        - on the device (in tables): every block of its table goes back on free_blocks with ref count
          0, and its tables entry goes;
        - swapped out (in swapped, lesson 06's swap pool; such a sequence has no table): its CPU blocks
          go back on free_swap_blocks, and its swapped entry goes;
        - either way its num_tokens entry goes too. The engine frees a swapped sequence when its
          request is aborted, so a free that ignores swapped leaks the swap pool.
        """
        raise NotImplementedError("Lesson 04, task 3: PagedAllocator.free: give every block back, on the device "
                                  "or in the swap pool. Check it with: pytest tests/exercises -k lesson04_task3")
