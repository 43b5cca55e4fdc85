"""Lesson 04: the paged KV cache. The pool is num_blocks blocks of block_size token slots; a
sequence's block table lists its blocks in order.

Task 1  PagedAllocator.allocate       pytest tests/exercises -k lesson04_task1
Task 2  PagedAllocator.append_slots   pytest tests/exercises -k lesson04_task2
Task 3  PagedAllocator.free           pytest tests/exercises -k lesson04_task3

Work on the state BlockManager keeps (minicb/block_manager.py): `self.free_blocks` (a deque of free
block ids: take from the left), `self.ref_counts[block]` (1 while a sequence holds it, 0 when free),
`self.tables[seq_id]` (the block table) and `self.num_tokens[seq_id]` (slots it holds tokens for).
`self.blocks_to_reserve(num_tokens, reserve_tokens)`, `self.new_blocks_needed(seq_id, n)` and
`NoFreeBlocks` are there to use. The engine checks `check_invariants()` after every step.
"""
from __future__ import annotations

from minicb.block_manager import BlockManager, NoFreeBlocks  # noqa: F401  (NoFreeBlocks: for your errors)


class PagedAllocator(BlockManager):
    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """Start seq_id's block table with self.blocks_to_reserve(num_tokens, reserve_tokens) blocks
        taken from the free list; record num_tokens; return the table. Raise ValueError if seq_id
        already has blocks, NoFreeBlocks if too few are free (taking none)."""
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.allocate: blocks for a new sequence. "
                                  "Check it with: pytest tests/exercises -k lesson04_task1")

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        """Make room for num_new_tokens more tokens: new blocks only when the last one is full
        (self.new_blocks_needed tells how many); NoFreeBlocks if too few are free (taking none).
        Return the table."""
        raise NotImplementedError("Lesson 04, task 2: PagedAllocator.append_slots: a new block only when the "
                                  "last one is full. Check it with: pytest tests/exercises -k lesson04_task2")

    def free(self, seq_id: str) -> None:
        """Give every block of seq_id back to the free list and forget the sequence."""
        raise NotImplementedError("Lesson 04, task 3: PagedAllocator.free: give every block back. "
                                  "Check it with: pytest tests/exercises -k lesson04_task3")
