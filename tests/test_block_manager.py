"""The KV pool: PagedAllocator on its own, the BlockManager over it (both reservation modes, truncation,
swapping), and the invariants, each broken rule named."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minicb.course.pool_rules import check_pool
from minicb.kv.block_manager import BlockManager
from minicb.kv.paged_allocator import NoFreeBlocks, PagedAllocator
from minicb.kv.prefix_cache import block_hashes


def test_the_allocator_stands_alone_and_the_manager_composes_it():
    assert not issubclass(BlockManager, PagedAllocator) and not issubclass(PagedAllocator, BlockManager)
    pool = PagedAllocator(num_blocks=4, block_size=2, num_swap_blocks=2)
    assert pool.can_allocate(3, keep_free=2) and not pool.can_allocate(3, keep_free=3)
    assert pool.allocate("a", 3) == [0, 1] and pool.ref_counts == [1, 1, 0, 0]
    assert pool.can_append("a", 3, keep_free=1) and not pool.can_append("a", 3, keep_free=2)
    assert pool.append_slots("a", 1) == [0, 1]              # 4 tokens fill 2 blocks exactly
    pool.free("a")
    assert (list(pool.free_blocks), pool.tables, pool.num_tokens) == ([2, 3, 0, 1], {}, {})

    class Counting(PagedAllocator):
        allocations = 0

        def allocate(self, seq_id, num_tokens, reserve_tokens=0):
            Counting.allocations += 1
            return super().allocate(seq_id, num_tokens, reserve_tokens)

    bm = BlockManager(num_blocks=4, block_size=2, num_swap_blocks=2, allocator=Counting)
    bm.allocate("a", 1)
    assert Counting.allocations == 1 and isinstance(bm.allocator, Counting)
    assert bm.tables is bm.allocator.tables and bm.free_blocks is bm.allocator.free_blocks   # one state, read through
    assert (bm.num_blocks, bm.block_size, bm.num_swap_blocks) == (4, 2, 2)


def test_paged_allocation_grows_one_block_at_a_time():
    bm = BlockManager(num_blocks=8, block_size=4)
    assert bm.allocate("a", 5) == [0, 1]           # 5 tokens -> 2 blocks
    bm.append_slots("a", 3)                          # 8 tokens still fit in 2 blocks
    assert len(bm.tables["a"]) == 2
    bm.append_slots("a")                             # the 9th token opens block 3
    assert bm.tables["a"] == [0, 1, 2]
    u = bm.usage()
    assert (u.owned_blocks, u.free_blocks, u.reserved_slots, u.token_slots) == (3, 5, 12, 9)
    bm.check_invariants()
    bm.free("a")
    assert bm.usage().free_blocks == 8
    bm.check_invariants()


def test_contiguous_reservation_holds_max_model_len_up_front():
    bm = BlockManager(num_blocks=10, block_size=4, reservation="contiguous", max_model_len=16)
    bm.allocate("a", 3)
    u = bm.usage()
    assert (u.owned_blocks, u.token_slots, u.empty_reserved_slots) == (4, 3, 13)
    for _ in range(13):
        bm.append_slots("a")                        # never needs another block
    assert len(bm.tables["a"]) == 4
    bm.allocate("b", 1)
    assert not bm.can_allocate(1)                   # 2 free blocks cannot hold a third reservation
    paged = BlockManager(num_blocks=10, block_size=4)
    for name in "abcdefghij":
        paged.allocate(name, 3)                     # paging fits 10 such sequences, contiguous 2
    paged.check_invariants()


def test_running_out_of_blocks_is_an_error_not_a_corruption():
    bm = BlockManager(num_blocks=2, block_size=2)
    bm.allocate("a", 4)
    assert not bm.can_append("a")
    with pytest.raises(NoFreeBlocks):
        bm.append_slots("a")
    with pytest.raises(NoFreeBlocks):
        bm.allocate("b", 1)
    bm.check_invariants()
    with pytest.raises(ValueError, match="already has blocks"):
        bm.allocate("a", 1)


def test_swap_out_free_and_swap_in_keep_both_pools_whole():
    bm = BlockManager(num_blocks=4, block_size=2, num_swap_blocks=3)
    bm.allocate("a", 3)
    bm.allocate("b", 1)
    assert bm.swap_out("a") == [(0, 0), (1, 1)] and bm.tables == {"b": [2]} and bm.num_tokens["a"] == 3
    with pytest.raises(ValueError, match="already has blocks"):
        bm.allocate("a", 1)                         # swapped out still counts as holding blocks
    assert bm.blocks_to_start("a", 1) == 2 and bm.available_blocks() == 3   # its 2 blocks, the 4th token fits them
    assert bm.swap_in("a") == [(0, 3), (1, 0)] and not bm.swapped
    bm.check_invariants()
    bm.swap_out("b")
    bm.free("b")                                    # a swapped sequence's CPU blocks go back
    assert sorted(bm.free_swap_blocks) == [0, 1, 2] and "b" not in bm.num_tokens
    bm.check_invariants()


def test_truncate_gives_back_the_blocks_past_the_tokens_kept():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.allocate("a", 7)
    bm.truncate("a", 3)
    assert bm.tables["a"] == [0, 1] and bm.num_tokens["a"] == 3 and sorted(bm.free_blocks) == [2, 3]
    bm.truncate("a", 0)
    assert bm.tables["a"] == [0]                    # a sequence keeps one block to come back to
    bm.check_invariants()


def corrupt(how: str) -> BlockManager:
    bm = BlockManager(num_blocks=6, block_size=2, num_swap_blocks=4)
    bm.allocate("a", 2)
    bm.allocate("b", 3)
    bm.allocate("c", 1)
    bm.swap_out("c")
    if how == "double owner":
        bm.tables["b"][0] = bm.tables["a"][0]
        bm.ref_counts[bm.tables["a"][0]] = 2
    elif how == "freed twice":
        bm.free_blocks.append(bm.free_blocks[0])
    elif how == "held and free":
        bm.free_blocks.append(bm.tables["a"][0])
    elif how == "lost block":
        bm.tables["b"].pop()
    elif how == "ref count":
        bm.ref_counts[bm.tables["a"][0]] = 0
    elif how == "short table":
        bm.num_tokens["a"] = 5
    elif how == "forgotten count":
        del bm.num_tokens["a"]
    elif how == "remembered count":
        bm.num_tokens["gone"] = 2                   # a free that forgot to forget the count
    elif how == "leaked swap":
        del bm.swapped["c"], bm.num_tokens["c"]
    elif how == "swapped, not forgotten":
        del bm.num_tokens["c"]
    return bm


@pytest.mark.parametrize("how,rule", [
    ("double owner", r"block 0 is in two tables at once \('a' and 'b'\) but is no cached prefix"),
    ("freed twice", "block 4 returned twice: it is on the free list 2 times"),
    ("held and free", "block 0 returned twice: it is on the free list while 'a' still holds it"),
    ("lost block", r"blocks lost: 1 of 6 are neither free nor held \(block 2, ref count 1\): no table lists it"),
    ("ref count", r"block 0: ref count 0, but 1 sequence\(s\) hold it \('a'\)"),
    ("short table", "'a'.s table has 2 slots for 5 tokens"),
    ("forgotten count", "'a' has a table but no token count"),
    ("remembered count", "'gone' still has a token count but no blocks: free must forget it everywhere"),
    ("leaked swap", "swap blocks lost: 1 of 4 are neither free nor held — does free give a swapped sequence's"),
    ("swapped, not forgotten", "'c' is still in swapped but has no token count"),
])
def test_invariant_check_names_the_broken_rule(how, rule):
    bm = corrupt(how)
    with pytest.raises(AssertionError):
        bm.check_invariants()   # the engine's own check, terse
    with pytest.raises(AssertionError, match=rule):
        check_pool(bm)


class ReturnsEveryBlock(PagedAllocator):
    """free as "every block of the table goes back with ref count 0" reads, blind to sharing."""

    def free(self, seq_id: str) -> None:
        for block in self.tables.pop(seq_id):
            self.ref_counts[block] = 0
            self.free_blocks.append(block)
        del self.num_tokens[seq_id]


class KeepsZeroBlocks(PagedAllocator):
    """free that counts the holders down and never gives a block back."""

    def free(self, seq_id: str) -> None:
        for block in self.tables.pop(seq_id):
            self.ref_counts[block] -= 1
        del self.num_tokens[seq_id]


@pytest.mark.parametrize("allocator,rule", [
    (ReturnsEveryBlock, r"block 0 returned twice: it is in the prefix cache's LRU while 'b' still holds it \(ref count 0\)"),
    (KeepsZeroBlocks, r"blocks lost: 1 of 6 are neither free nor held \(block 2, ref count 0\): free puts"),
])
def test_a_free_blind_to_shared_blocks_is_named_for_what_it_did(allocator, rule):
    """'a' and 'b' share a's 2 cached blocks (a prefix hit); free('a') must leave them to 'b'. The
    invariant check says which block went where, not a count of blocks lost."""
    bm = BlockManager(6, 2, allocator=allocator)
    bm.allocate("a", 5)
    bm.cache_full_blocks("a", block_hashes([1, 2, 3, 4, 5], 2), [1, 2, 3, 4, 5])
    bm.set_prefix_hit("b", bm.tables["a"][:2])
    bm.allocate("b", 1)
    bm.check_invariants()
    bm.free("a")
    with pytest.raises(AssertionError):
        bm.check_invariants()
    with pytest.raises(AssertionError, match=rule):
        check_pool(bm)


def test_config_errors():
    with pytest.raises(ValueError, match="kv_reservation='ring' is unknown"):
        BlockManager(4, 2, reservation="ring")
    with pytest.raises(ValueError, match="needs max_model_len"):
        BlockManager(4, 2, reservation="contiguous")


@settings(max_examples=150, deadline=None)
@given(block_size=st.sampled_from([1, 2, 4, 16]), num_blocks=st.integers(1, 24),
       num_swap_blocks=st.integers(0, 8),
       ops=st.lists(st.tuples(st.sampled_from(["alloc", "append", "free", "truncate", "swap_out", "swap_in"]),
                              st.integers(0, 5), st.integers(1, 40)), max_size=60))
def test_random_operations_keep_the_invariants(block_size, num_blocks, num_swap_blocks, ops):
    bm = BlockManager(num_blocks, block_size, num_swap_blocks=num_swap_blocks)
    for op, seq, n in ops:
        sid = f"s{seq}"
        on_device, swapped = sid in bm.tables, sid in bm.swapped
        if op == "alloc" and not on_device and not swapped and bm.can_allocate(n):
            bm.allocate(sid, n)
        elif op == "append" and on_device and bm.can_append(sid, n):
            bm.append_slots(sid, n)
        elif op == "free" and (on_device or swapped):
            bm.free(sid)
        elif op == "truncate" and on_device:
            bm.truncate(sid, min(n, bm.num_tokens[sid]))
        elif op == "swap_out" and on_device and bm.can_swap_out(sid):
            bm.swap_out(sid)
        elif op == "swap_in" and swapped and bm.blocks_to_start(sid, 0) <= bm.available_blocks():
            bm.swap_in(sid)
        bm.check_invariants()
        assert bm.usage().token_slots == sum(n for s, n in bm.num_tokens.items() if s in bm.tables)
    for sid in list(bm.tables) + list(bm.swapped):
        bm.free(sid)
    usage = bm.usage()
    assert (usage.free_blocks, usage.swapped_blocks) == (num_blocks, 0)
