"""The KV block manager (lessons 04, 06, 10): the only owner of block ids. A reservation policy over one
allocator (PagedAllocator or a learner's), plus what it leaves out: truncation, swapping, prefix caching
and inspection. A cached block no table holds waits in an LRU until allocation needs it."""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from minicb.kv.eviction import CachedBlock
from minicb.kv.paged_allocator import NoFreeBlocks, PagedAllocator, blocks_for


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


def allocator_state(name: str) -> property:
    """The allocator's attribute `name`: the allocator holds the ledger."""
    return property(lambda self: getattr(self.allocator, name))


class BlockManager:
    free_blocks = allocator_state("free_blocks")
    ref_counts = allocator_state("ref_counts")
    tables = allocator_state("tables")
    num_tokens = allocator_state("num_tokens")
    free_swap_blocks = allocator_state("free_swap_blocks")
    swapped = allocator_state("swapped")

    def __init__(self, num_blocks: int, block_size: int, reservation: str = "paged",
                 max_model_len: int | None = None, num_swap_blocks: int = 0, allocator: type = PagedAllocator,
                 choose_eviction: Callable[[Sequence[CachedBlock]], int] | None = None):
        if reservation not in ("paged", "contiguous"):
            raise ValueError(f"kv_reservation={reservation!r} is unknown; use 'paged' or 'contiguous'")
        if reservation == "contiguous" and max_model_len is None:
            raise ValueError("contiguous reservation needs max_model_len: it reserves that much per sequence")
        self.num_blocks, self.block_size, self.num_swap_blocks = num_blocks, block_size, num_swap_blocks
        self.reservation, self.max_model_len = reservation, max_model_len
        self.allocator = allocator(num_blocks, block_size, num_swap_blocks)
        # Prefix caching's state, empty without it.
        self.cached: dict[bytes, int] = {}       # chain hash -> the block holding that prefix's last block
        self.block_hash: dict[int, bytes] = {}   # cached block -> its chain hash (the inverse of cached)
        # cached block -> (parent hash, its token ids): what course/pool_rules.py checks its name against
        self.block_origin: dict[int, tuple[bytes | None, list[int]]] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks no table holds, LRU first
        self.cached_upto: dict[str, int] = {}    # per table: its leading blocks already offered to the cache
        self._prefix_hits: dict[str, list[int]] = {}  # sequence -> the cached blocks its allocate starts with
        self.choose_eviction = choose_eviction  # None: least recently used
        self.block_stats: dict[int, CachedBlock] = {}  # cached block -> all an eviction policy may know of it
        self._released = 0   # cached blocks released so far: the clock of CachedBlock.last_used

    def _reserve(self, reserve_tokens: int) -> int:
        return max(reserve_tokens, self.max_model_len) if self.reservation == "contiguous" else reserve_tokens

    def blocks_to_reserve(self, num_tokens: int, reserve_tokens: int) -> int:
        return blocks_for(max(num_tokens, self._reserve(reserve_tokens)), self.block_size)

    def set_prefix_hit(self, seq_id: str, blocks: list[int]) -> None:
        """seq_id's next allocate starts its table with these cached blocks; until then none is evicted."""
        if blocks:
            self._prefix_hits[seq_id] = blocks
        else:
            self._prefix_hits.pop(seq_id, None)

    def _promised(self) -> set[int]:
        return {block for hit in self._prefix_hits.values() for block in hit if block in self.evictable}

    def _spare_evictable(self) -> int:
        return len(self.evictable) - len(self._promised())

    def available_blocks(self) -> int:
        """Free blocks and cached ones no table holds."""
        return len(self.free_blocks) + len(self.evictable)

    def blocks_to_start(self, seq_id: str, num_tokens: int, hit: Collection[int] = ()) -> int:
        """Of available_blocks, those a swapped or new sequence (after its prefix hit `hit`) takes to run its
        first num_tokens. Two hits sharing an evictable block count it twice: never too few."""
        if seq_id in self.swapped:
            return max(len(self.swapped[seq_id]),
                       blocks_for(self.num_tokens[seq_id] + num_tokens, self.block_size))
        reused = sum(block in self.evictable for block in hit)
        return self.blocks_to_reserve(num_tokens, 0) + reused

    def blocks_freed_by(self, seq_id: str) -> int:
        """Blocks the pool gets back if this sequence gives way: those no other table holds."""
        return sum(self.ref_counts[block] == 1 for block in self.tables[seq_id])

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, keep_free: int = 0) -> bool:
        """With a prefix hit set, num_tokens counts the tokens after the hit's blocks."""
        # The allocator knows only its free list: evictable blocks count as that much less to keep free.
        return self.allocator.can_allocate(num_tokens, self._reserve(reserve_tokens),
                                           keep_free - self._spare_evictable())

    def allocate(self, seq_id: str, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        """A table with slots for num_tokens and room for reserve_tokens (or max_model_len, contiguous). After
        set_prefix_hit it starts with the hit's blocks, and num_tokens counts the tokens after them."""
        hit = self._prefix_hits.get(seq_id)
        if not hit:
            self._evict(self.blocks_to_reserve(num_tokens, reserve_tokens))
            table = self.allocator.allocate(seq_id, num_tokens, self._reserve(reserve_tokens))
            self.cached_upto[seq_id] = 0
            return table
        needed = blocks_for(num_tokens, self.block_size)
        if needed > len(self.free_blocks) + self._spare_evictable():   # checked before taking any
            raise NoFreeBlocks(f"{seq_id!r} needs {needed} blocks after its prefix hit, "
                               f"{len(self.free_blocks) + self._spare_evictable()} free or evictable")
        del self._prefix_hits[seq_id]
        self.allocator.allocate(seq_id, 0)   # an empty table, in the allocator's own bookkeeping
        for block in hit:
            if self.ref_counts[block] == 0:
                del self.evictable[block]
            self.ref_counts[block] += 1
            if block in self.block_stats:   # lesson 04's graders share blocks that were never cached
                self.block_stats[block] = replace(self.block_stats[block],
                                                  hits=self.block_stats[block].hits + 1)
        self.tables[seq_id] = hit + self.tables[seq_id]
        self.num_tokens[seq_id] = len(hit) * self.block_size
        self.cached_upto[seq_id] = len(hit)
        return self.append_slots(seq_id, num_tokens)

    def can_append(self, seq_id: str, num_new_tokens: int = 1, keep_free: int = 0) -> bool:
        return self.allocator.can_append(seq_id, num_new_tokens, keep_free - self._spare_evictable())

    def append_slots(self, seq_id: str, num_new_tokens: int = 1) -> list[int]:
        self._evict(self.new_blocks_needed(seq_id, num_new_tokens))
        return self.allocator.append_slots(seq_id, num_new_tokens)

    def free(self, seq_id: str) -> None:
        free_before = len(self.free_blocks)
        self.allocator.free(seq_id)
        self.cached_upto.pop(seq_id, None)
        if self.block_hash:
            # The allocator gave back, on the right, every block that reached ref count 0: the cached
            # ones among them move to the LRU.
            freed = [self.free_blocks.pop() for _ in range(len(self.free_blocks) - free_before)]
            self._park(freed[::-1])

    def cache_full_blocks(self, seq_id: str, hashes: list[bytes], token_ids: list[int]) -> None:
        """Name seq_id's full blocks: hashes[i] is block i's chain hash. A cached hash keeps its block."""
        table, size = self.tables[seq_id], self.block_size
        for i in range(self.cached_upto[seq_id], len(hashes)):
            if hashes[i] not in self.cached:
                self.cached[hashes[i]], self.block_hash[table[i]] = table[i], hashes[i]
                self.block_origin[table[i]] = (hashes[i - 1] if i else None,
                                               token_ids[i * size:(i + 1) * size])
                self.block_stats[table[i]] = CachedBlock(table[i], depth=i, hits=0, last_used=self._released)
        self.cached_upto[seq_id] = max(self.cached_upto[seq_id], len(hashes))

    def _evict(self, needed: int) -> None:
        """Evict cached blocks no table holds until `needed` are free: each loses its name."""
        promised = self._promised()
        while len(self.free_blocks) < needed and len(self.evictable) > len(promised):
            block = self._eviction_choice(promised)
            del self.evictable[block]
            del self.cached[self.block_hash.pop(block)]
            del self.block_origin[block], self.block_stats[block]
            self.free_blocks.append(block)

    def _eviction_choice(self, promised: set[int]) -> int:
        candidates = [block for block in self.evictable if block not in promised]
        if self.choose_eviction is None:
            return candidates[0]   # the least recently used
        return self.choose_eviction(tuple(self.block_stats[block] for block in candidates))

    def _park(self, blocks: list[int]) -> None:
        """Blocks just at ref count 0, in table order. Cached ones join the LRU deepest first, so that a
        sequence's tail, least likely shared, is evicted before its beginning (as vLLM does)."""
        self.free_blocks.extend(block for block in blocks if block not in self.block_hash)
        for block in reversed(blocks):
            if block in self.block_hash:
                self.evictable[block] = None
                self._released += 1
                self.block_stats[block] = replace(self.block_stats[block], last_used=self._released)

    def new_blocks_needed(self, seq_id: str, num_new_tokens: int = 1) -> int:
        return max(0, blocks_for(self.num_tokens[seq_id] + num_new_tokens, self.block_size)
                   - len(self.tables[seq_id]))

    def truncate(self, seq_id: str, num_tokens: int) -> None:
        """Shrink back to num_tokens slots, keeping one block."""
        self.num_tokens[seq_id] = num_tokens
        table = self.tables[seq_id]
        while len(table) > max(1, blocks_for(num_tokens, self.block_size)):
            self._release([table.pop()])

    def can_swap_out(self, seq_id: str) -> bool:
        return len(self.tables[seq_id]) <= len(self.free_swap_blocks)

    def swap_out(self, seq_id: str) -> list[tuple[int, int]]:
        """-> (device block, CPU block) pairs to copy."""
        if not self.can_swap_out(seq_id):
            raise NoFreeBlocks(f"{seq_id!r} needs {len(self.tables[seq_id])} swap blocks, "
                               f"{len(self.free_swap_blocks)} free")
        table = self.tables.pop(seq_id)
        cpu = [self.free_swap_blocks.popleft() for _ in table]
        self._release(table)   # a shared cached block stays with its other holders: the copy is just its data
        self.cached_upto.pop(seq_id, None)
        self.swapped[seq_id] = cpu
        return list(zip(table, cpu))

    def swap_in(self, seq_id: str) -> list[tuple[int, int]]:
        """-> (CPU block, device block) pairs to copy."""
        cpu = self.swapped[seq_id]
        self._evict(len(cpu))
        if len(cpu) > len(self.free_blocks):
            raise NoFreeBlocks(f"{seq_id!r} needs {len(cpu)} blocks to swap in, {len(self.free_blocks)} free")
        del self.swapped[seq_id]
        # Private blocks, even where it shared cached ones: they are offered to the cache again.
        self.tables[seq_id] = [self._take() for _ in cpu]
        self.cached_upto[seq_id] = 0
        self.free_swap_blocks.extend(cpu)
        return list(zip(cpu, self.tables[seq_id]))

    def usage(self) -> BlockUsage:
        free = len(self.free_blocks) + len(self.evictable)   # a cached block no one holds is free to take
        owned = self.num_blocks - free
        on_device = sum(n for seq_id, n in self.num_tokens.items() if seq_id in self.tables)
        return BlockUsage(self.num_blocks, free, owned, owned * self.block_size, on_device,
                          self.num_swap_blocks - len(self.free_swap_blocks))

    def check_invariants(self) -> None:
        """The ledger (EngineConfig.check_kv_invariants): each block is in one place, its ref count counts
        its holders, and each table covers its tokens. minicb/course/pool_rules.py says what breaks a rule."""
        held = Counter(block for table in self.tables.values() for block in table)
        places = Counter(self.free_blocks) + Counter(self.evictable.keys()) + Counter(held.keys())
        pool = set(range(self.num_blocks))
        odd = sorted(b for b in places.keys() | pool if places[b] != 1 or b not in pool)
        assert not odd, f"blocks {odd} are not in exactly one place: the free list, the LRU or tables"
        wrong = [b for b in range(self.num_blocks) if self.ref_counts[b] != held[b]]
        assert not wrong, f"blocks {wrong}: the ref count is not the number of tables holding the block"
        assert all(n == 1 or b in self.block_hash for b, n in held.items()), "an unnamed block is shared"
        assert not self.block_hash.keys() & set(self.free_blocks), "a free block keeps its prefix hash"
        assert self.evictable.keys() <= self.block_hash.keys(), "an evictable block has no prefix hash"
        assert self.cached == {h: b for b, h in self.block_hash.items()}, "cached and block_hash disagree"
        seqs = self.tables.keys() | self.swapped.keys()
        assert self.num_tokens.keys() == seqs, "num_tokens and the tables disagree"
        assert not self.tables.keys() & self.swapped.keys(), "a sequence is on the device and swapped"
        for seq_id, blocks in [*self.tables.items(), *self.swapped.items()]:
            assert len(blocks) * self.block_size >= self.num_tokens[seq_id], f"{seq_id!r} has too few slots"
        swap = Counter(self.free_swap_blocks) + Counter(b for cpu in self.swapped.values() for b in cpu)
        assert swap == Counter(range(self.num_swap_blocks)), "a swap block is lost, or in two places"

    def _release(self, blocks: list[int]) -> None:
        for block in blocks:
            self.ref_counts[block] -= 1
        self._park([block for block in blocks if self.ref_counts[block] == 0])

    def _take(self) -> int:
        block = self.free_blocks.popleft()
        self.ref_counts[block] += 1
        return block
