"""PagedAllocator: KV blocks from a free list (lesson 04's reference), plus a CPU swap pool (lesson 06).
BlockManager (minicb/kv/block_manager.py) adds reservation, swapping and prefix sharing on top."""
from __future__ import annotations

from collections import deque


class NoFreeBlocks(RuntimeError):
    pass


def blocks_for(num_tokens: int, block_size: int) -> int:
    """ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


class PagedAllocator:
    """Methods use only the state set in __init__, so they also run on a learner's allocator with that state.
    ref_counts[b] = number of tables holding b (above 1 only for a shared prefix, lesson 10).
    free subtracts 1 per block and gives a block back only when its count reaches 0."""

    def __init__(self, num_blocks: int, block_size: int, num_swap_blocks: int = 0):
        self.num_blocks, self.block_size, self.num_swap_blocks = num_blocks, block_size, num_swap_blocks
        self.free_blocks: deque[int] = deque(range(num_blocks))   # take from the left, give back on the right
        self.ref_counts = [0] * num_blocks           # tables holding the block; 0: it is free
        self.tables: dict[str, list[int]] = {}       # seq_id -> its device blocks, in order
        self.num_tokens: dict[str, int] = {}         # tokens each sequence has slots for, swapped ones too
        self.free_swap_blocks: deque[int] = deque(range(num_swap_blocks))
        self.swapped: dict[str, list[int]] = {}      # swapped-out seq_id -> its CPU blocks, in order

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        """True if allocate(_, num_tokens, reserve_tokens) would succeed and leave keep_free blocks free."""
        return (blocks_for(max(num_tokens, reserve_tokens), self.block_size) + keep_free
                <= len(self.free_blocks))

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """Start seq_id's table: slots for num_tokens, blocks for max(num_tokens, reserve_tokens)."""
        if seq_id in self.tables or seq_id in self.swapped:
            raise ValueError(f"sequence {seq_id!r} already has blocks")
        needed = blocks_for(max(num_tokens, reserve_tokens), self.block_size)
        if needed > len(self.free_blocks):   # check first: a failed allocate takes nothing
            raise NoFreeBlocks(f"{seq_id!r} needs {needed} blocks, {len(self.free_blocks)} free")
        table = [self.free_blocks.popleft() for _ in range(needed)]
        for block in table:
            self.ref_counts[block] += 1
        self.tables[seq_id], self.num_tokens[seq_id] = table, num_tokens
        return table

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        """True if append_slots(seq_id, num_new_tokens) would succeed and leave keep_free blocks free."""
        needed = (blocks_for(self.num_tokens[seq_id] + num_new_tokens, self.block_size)
                  - len(self.tables[seq_id]))
        return max(0, needed) + keep_free <= len(self.free_blocks)

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        """Add num_new_tokens slots; takes a new block only when the last one is full."""
        table = self.tables[seq_id]
        needed = blocks_for(self.num_tokens[seq_id] + num_new_tokens, self.block_size) - len(table)
        if needed > len(self.free_blocks):   # check first: a failed append takes nothing
            raise NoFreeBlocks(f"{seq_id!r} needs {needed} more blocks, {len(self.free_blocks)} free")
        for _ in range(needed):
            table.append(self.free_blocks.popleft())
            self.ref_counts[table[-1]] += 1
        self.num_tokens[seq_id] += num_new_tokens
        return table

    def free(self, seq_id: str) -> None:
        """Give back seq_id's device or swap blocks and forget it. KeyError if it holds none."""
        if seq_id not in self.num_tokens:
            raise KeyError(f"free({seq_id!r}): {seq_id!r} holds no blocks: it was freed already, or never "
                           "allocated; free each sequence once")
        if seq_id in self.swapped:   # swapped out: CPU blocks only
            self.free_swap_blocks.extend(self.swapped.pop(seq_id))
        else:
            for block in self.tables.pop(seq_id):
                self.ref_counts[block] -= 1
                if self.ref_counts[block] == 0:
                    self.free_blocks.append(block)
        del self.num_tokens[seq_id]
