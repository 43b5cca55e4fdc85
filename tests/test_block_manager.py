"""The KV block manager: allocation, growth, freeing, both reservation modes, and its invariants."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minicb.block_manager import BlockManager, NoFreeBlocks


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


def test_invariant_check_catches_a_double_owner():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.allocate("a", 2)
    bm.allocate("b", 2)
    bm.tables["b"] = list(bm.tables["a"])           # corrupt: two owners of one block
    with pytest.raises(AssertionError):
        bm.check_invariants()


def test_config_errors():
    with pytest.raises(ValueError, match="kv_reservation='ring' is unknown"):
        BlockManager(4, 2, reservation="ring")
    with pytest.raises(ValueError, match="needs max_model_len"):
        BlockManager(4, 2, reservation="contiguous")


@settings(max_examples=150, deadline=None)
@given(block_size=st.sampled_from([1, 2, 4, 16]), num_blocks=st.integers(1, 24),
       ops=st.lists(st.tuples(st.sampled_from(["alloc", "append", "free"]), st.integers(0, 5), st.integers(1, 40)),
                    max_size=60))
def test_random_operations_keep_the_invariants(block_size, num_blocks, ops):
    bm = BlockManager(num_blocks, block_size)
    for op, seq, n in ops:
        sid = f"s{seq}"
        if op == "alloc" and sid not in bm.tables and bm.can_allocate(n):
            bm.allocate(sid, n)
        elif op == "append" and sid in bm.tables and bm.can_append(sid, n):
            bm.append_slots(sid, n)
        elif op == "free" and sid in bm.tables:
            bm.free(sid)
        bm.check_invariants()
        assert bm.usage().token_slots == sum(bm.num_tokens.values())
    for sid in list(bm.tables):
        bm.free(sid)
    assert bm.usage().free_blocks == num_blocks
