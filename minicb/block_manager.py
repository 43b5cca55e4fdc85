"""The KV block manager: the only owner of KV-cache block ids.

The cache is a pool of fixed-size blocks (block_size token slots each). A sequence holds a block
table, the list of its blocks in order; token i of the sequence lives in slot i % block_size of
block table[i // block_size]. Two ways to hand out blocks, which lesson 04 compares:

- "contiguous": reserve room for max_model_len tokens when a sequence starts, as servers did
  before paging. Simple, and most of it sits empty for most of the sequence's life.
- "paged": give a sequence blocks for the tokens it has, and one more block only when its last
  block fills. Memory follows real tokens, so more sequences fit.

A second, smaller pool in CPU memory takes the blocks of sequences that are swapped out under
memory pressure (lesson 06); swap_out/swap_in return the (from, to) block pairs the runner copies.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockUsage:
    """A snapshot of the pool, in blocks and token slots."""
    num_blocks: int
    free_blocks: int
    owned_blocks: int       # held by some sequence
    reserved_slots: int     # every slot in owned blocks
    token_slots: int        # slots holding a real token's K/V
    swapped_blocks: int = 0  # blocks of swapped-out sequences, in the CPU pool

    @property
    def empty_reserved_slots(self) -> int:
        return self.reserved_slots - self.token_slots


class NoFreeBlocks(RuntimeError):
    pass


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, reservation: str = "paged",
                 max_model_len: int | None = None, num_swap_blocks: int = 0, allocator=None):
        if reservation not in ("paged", "contiguous"):
            raise ValueError(f"kv_reservation={reservation!r} is unknown; use 'paged' or 'contiguous'")
        if reservation == "contiguous" and max_model_len is None:
            raise ValueError("contiguous reservation needs max_model_len: it reserves that much per sequence")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.reservation, self.max_model_len = reservation, max_model_len
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.ref_counts = [0] * num_blocks
        self.tables: dict[str, list[int]] = {}
        self.num_tokens: dict[str, int] = {}   # tokens each sequence has K/V slots for
        self.num_swap_blocks = num_swap_blocks
        self.free_swap_blocks: deque[int] = deque(range(num_swap_blocks))
        self.swapped: dict[str, list[int]] = {}   # swapped-out sequence -> its CPU blocks, in order

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_to_reserve(self, num_tokens: int, reserve_tokens: int) -> int:
        if self.reservation == "contiguous":
            reserve_tokens = max(reserve_tokens, self.max_model_len)
        return self.blocks_for(max(num_tokens, reserve_tokens))

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        return self.blocks_to_reserve(num_tokens, reserve_tokens) + keep_free <= len(self.free_blocks)

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """Start a sequence's table with slots for num_tokens, and room for at least reserve_tokens
        (static batching reserves prompt + max_tokens) or max_model_len (contiguous reservation)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already has blocks")
        needed = self.blocks_to_reserve(num_tokens, reserve_tokens)
        if needed > len(self.free_blocks):
            raise NoFreeBlocks(f"{seq_id!r} needs {needed} blocks, {len(self.free_blocks)} free")
        self.tables[seq_id] = [self._take() for _ in range(needed)]
        self.num_tokens[seq_id] = num_tokens
        return self.tables[seq_id]

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        return self.new_blocks_needed(seq_id, num_new_tokens) + keep_free <= len(self.free_blocks)

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        """Make room for num_new_tokens more tokens; a new block only when the last one is full."""
        missing = self.new_blocks_needed(seq_id, num_new_tokens)
        if missing > len(self.free_blocks):
            raise NoFreeBlocks(f"{seq_id!r} needs {missing} more blocks, {len(self.free_blocks)} free")
        self.tables[seq_id].extend(self._take() for _ in range(missing))
        self.num_tokens[seq_id] += num_new_tokens
        return self.tables[seq_id]

    def truncate(self, seq_id: str, num_tokens: int) -> None:
        """Shrink a sequence back to num_tokens slots (a victim gives back the slots of this step)."""
        self.num_tokens[seq_id] = num_tokens
        table = self.tables[seq_id]
        while len(table) > max(1, self.blocks_for(num_tokens)):
            self._release(table.pop())

    def can_swap_out(self, seq_id: str) -> bool:
        return len(self.tables[seq_id]) <= len(self.free_swap_blocks)

    def swap_out(self, seq_id: str) -> list[tuple[int, int]]:
        """Move a sequence's blocks to the CPU pool: -> (device block, CPU block) pairs to copy."""
        if not self.can_swap_out(seq_id):
            raise NoFreeBlocks(f"{seq_id!r} needs {len(self.tables[seq_id])} swap blocks, "
                               f"{len(self.free_swap_blocks)} free")
        table = self.tables.pop(seq_id)
        cpu = [self.free_swap_blocks.popleft() for _ in table]
        for block in table:
            self._release(block)
        self.swapped[seq_id] = cpu
        return list(zip(table, cpu))

    def can_swap_in(self, seq_id: str, keep_free: int = 0, num_new_tokens: int = 1) -> bool:
        """Room for the sequence's blocks and for its next num_new_tokens tokens, with keep_free
        blocks to spare."""
        blocks = len(self.swapped[seq_id])
        growth = max(0, self.blocks_for(self.num_tokens[seq_id] + num_new_tokens) - blocks)
        return blocks + growth + keep_free <= len(self.free_blocks)

    def swap_in(self, seq_id: str) -> list[tuple[int, int]]:
        """Bring a swapped sequence back: -> (CPU block, device block) pairs to copy."""
        cpu = self.swapped.pop(seq_id)
        if len(cpu) > len(self.free_blocks):
            self.swapped[seq_id] = cpu
            raise NoFreeBlocks(f"{seq_id!r} needs {len(cpu)} blocks to swap in, {len(self.free_blocks)} free")
        self.tables[seq_id] = [self._take() for _ in cpu]
        self.free_swap_blocks.extend(cpu)
        return list(zip(cpu, self.tables[seq_id]))

    def free(self, seq_id: str) -> None:
        """Give back everything the sequence holds, on the device or in the swap pool."""
        if seq_id in self.swapped:
            self.free_swap_blocks.extend(self.swapped.pop(seq_id))
            del self.num_tokens[seq_id]
            return
        for block in self.tables.pop(seq_id):
            self._release(block)
        del self.num_tokens[seq_id]

    def usage(self) -> BlockUsage:
        owned = self.num_blocks - len(self.free_blocks)
        on_device = sum(n for seq_id, n in self.num_tokens.items() if seq_id in self.tables)
        return BlockUsage(self.num_blocks, len(self.free_blocks), owned, owned * self.block_size, on_device,
                          self.num_swap_blocks - len(self.free_swap_blocks))

    def block_map(self) -> list[tuple[str | None, int]]:
        """Per device block: (owner, tokens stored in it). Owner None is a free block; an owner with 0
        tokens is reserved but still empty (contiguous reservation's waste)."""
        blocks: list[tuple[str | None, int]] = [(None, 0)] * self.num_blocks
        for seq_id, table in self.tables.items():
            for i, block in enumerate(table):
                blocks[block] = (seq_id, min(self.block_size, max(0, self.num_tokens[seq_id] - i * self.block_size)))
        return blocks

    def check_invariants(self) -> None:
        """No block owned twice or both owned and free; owned + free is the whole pool; every
        table covers its tokens. Raises AssertionError naming the first broken rule."""
        owners: dict[int, int] = {}
        for table in self.tables.values():
            for block in table:
                owners[block] = owners.get(block, 0) + 1
        free = list(self.free_blocks)
        assert len(set(free)) == len(free), "a block is on the free list twice"
        assert not owners.keys() & set(free), "a block is both owned and free"
        assert len(owners) + len(free) == self.num_blocks, "owned + free blocks != the pool"
        for block, count in owners.items():
            assert self.ref_counts[block] == count, f"block {block}: ref count != its {count} owners"
        assert all(self.ref_counts[b] == 0 for b in free), "a free block has a non-zero ref count"
        for seq_id, table in self.tables.items():
            assert len(table) * self.block_size >= self.num_tokens[seq_id], f"{seq_id!r}'s table is too short"
        swapped = [b for blocks in self.swapped.values() for b in blocks]
        swap_free = list(self.free_swap_blocks)
        assert len(set(swapped + swap_free)) == len(swapped) + len(swap_free) == self.num_swap_blocks, \
            "swap blocks lost or held twice"
        assert not self.swapped.keys() & self.tables.keys(), "a sequence is both on the device and swapped"
        for seq_id, blocks in self.swapped.items():
            assert len(blocks) * self.block_size >= self.num_tokens[seq_id], f"{seq_id!r}'s swap copy is too short"

    def new_blocks_needed(self, seq_id: str, num_new_tokens: int = 1) -> int:
        """Blocks the sequence must add to hold num_new_tokens more tokens."""
        return max(0, self.blocks_for(self.num_tokens[seq_id] + num_new_tokens) - len(self.tables[seq_id]))

    def _release(self, block: int) -> None:
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks.append(block)

    def _take(self) -> int:
        block = self.free_blocks.popleft()
        self.ref_counts[block] += 1
        return block


PagedAllocator = BlockManager   # TEMP until the lesson 04 split lands
