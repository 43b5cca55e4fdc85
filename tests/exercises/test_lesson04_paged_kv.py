"""Lesson 04's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Each test calls only its own task's method; the others come from minicb's BlockManager."""
from __future__ import annotations

import pytest

from minicb import course
from minicb.block_manager import BlockManager, NoFreeBlocks
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson04_paged_kv")


def with_only(method: str) -> type[BlockManager]:
    """A block manager whose `method` is the graded one and whose other two are minicb's."""
    others = {name: getattr(BlockManager, name) for name in ("allocate", "append_slots", "free") if name != method}
    return type("Graded", (mine.PagedAllocator,), others)


def serve_and_check(block_manager: type[BlockManager]) -> None:
    """The engine on this allocator, under pressure (preemptions), with the pool checked every step."""
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=6, num_blocks=12, block_size=4,
                       parts=EngineParts(block_manager=block_manager))
    for n in (9, 3, 14, 6, 11, 2, 8):
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True))
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.finished]
        engine.block_manager.check_invariants()
    assert sorted(len(o.outputs[0].token_ids) for o in outputs) == [2, 3, 6, 8, 9, 11, 14]
    assert engine.block_manager.usage().free_blocks == 12


def test_lesson04_task1_allocate_takes_the_blocks_a_sequence_needs():
    pool = with_only("allocate")(num_blocks=8, block_size=4)
    assert pool.allocate("a", 5) == [0, 1] and pool.num_tokens["a"] == 5
    assert pool.allocate("b", 4, reserve_tokens=9) == [2, 3, 4]          # room for 9 tokens
    assert [pool.ref_counts[b] for b in range(8)] == [1, 1, 1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError):
        pool.allocate("a", 1)
    with pytest.raises(NoFreeBlocks):
        pool.allocate("c", 13)
    assert len(pool.free_blocks) == 3 and "c" not in pool.tables            # a failed allocate takes nothing
    pool.check_invariants()
    contiguous = with_only("allocate")(num_blocks=10, block_size=4, reservation="contiguous", max_model_len=16)
    assert len(contiguous.allocate("x", 1)) == 4                             # max_model_len up front


def test_lesson04_task1_engine_serves_on_your_allocate():
    serve_and_check(with_only("allocate"))


def test_lesson04_task2_append_slots_adds_a_block_only_when_the_last_is_full():
    pool = with_only("append_slots")(num_blocks=4, block_size=4)
    BlockManager.allocate(pool, "a", 3)
    assert pool.append_slots("a") == [0] and pool.num_tokens["a"] == 4     # the block is now full
    assert pool.append_slots("a") == [0, 1]                                 # token 5 needs a new block
    assert pool.append_slots("a", 7) == [0, 1, 2] and pool.num_tokens["a"] == 12
    with pytest.raises(NoFreeBlocks):
        pool.append_slots("a", 5)                                           # 17 tokens need 5 blocks
    assert pool.tables["a"] == [0, 1, 2] and pool.num_tokens["a"] == 12     # unchanged
    pool.check_invariants()


def test_lesson04_task2_engine_serves_on_your_append_slots():
    serve_and_check(with_only("append_slots"))


def test_lesson04_task3_free_gives_every_block_back():
    pool = with_only("free")(num_blocks=6, block_size=2)
    BlockManager.allocate(pool, "a", 3)
    BlockManager.allocate(pool, "b", 2)
    BlockManager.append_slots(pool, "a", 2)
    pool.free("a")
    assert "a" not in pool.tables and "a" not in pool.num_tokens
    assert sorted(pool.free_blocks) == [0, 1, 3, 4, 5] and pool.tables["b"] == [2]
    pool.check_invariants()
    assert len(BlockManager.allocate(pool, "c", 10)) == 5                   # the freed blocks serve again


def test_lesson04_task3_engine_serves_on_your_free():
    serve_and_check(with_only("free"))
