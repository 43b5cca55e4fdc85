"""Lesson 04's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Each task is graded with only its own methods yours; the others are minicb's PagedAllocator's,
run on your instance (the state your __init__ sets is the same). Every assertion names its rule."""
from __future__ import annotations

import re

import pytest

from minicb import course
from minicb.block_manager import BlockManager, NoFreeBlocks, PagedAllocator
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson04_paged_kv")
TASK_METHODS = {1: ("can_allocate", "allocate"), 2: ("can_append", "append_slots"), 3: ("free",)}


def graded(task: int, allocator: type | None = None) -> type:
    """`allocator` (yours unless given) with only task `task`'s methods its own: minicb's for the others."""
    allocator = allocator or mine.PagedAllocator
    others = {name: getattr(PagedAllocator, name) for t, names in TASK_METHODS.items() if t != task for name in names}
    return type(f"{allocator.__name__}Task{task}", (allocator,), others)


@pytest.fixture(autouse=True)
def graded_methods_do_their_own_work(request, monkeypatch):
    """While task N is graded, minicb's methods of task N refuse to run, so yours cannot inherit or call
    them. (The reference is minicb's own class, so it is exempt.)"""
    task = re.match(r"test_lesson04_task(\d)_", request.node.name)
    if task is None or mine.PagedAllocator is PagedAllocator:
        return
    for name in TASK_METHODS[int(task.group(1))]:
        def refuse(*args, name=name, **kwargs):
            raise AssertionError(f"PagedAllocator.{name} must do the work itself, not call or inherit minicb's")
        monkeypatch.setattr(PagedAllocator, name, refuse)


def must_raise(error: type[Exception], rule: str, fn, *args, **kwargs) -> None:
    """fn(*args, **kwargs) raises `error`; if it returns instead, the test fails naming the rule."""
    try:
        fn(*args, **kwargs)
    except error:
        return
    pytest.fail(f"{rule}, but it returned")


LENGTHS = [9, 3, 14, 6, 11, 2, 8]
# Seven requests on eight 4-token blocks: some must give way. With "swap", 0.05 MB is 4 CPU blocks.
ENGINES = {"recompute": dict(max_num_seqs=6, num_blocks=8, block_size=4),
           "swap": dict(max_num_seqs=6, num_blocks=8, block_size=4, preemption_mode="swap", swap_space_mb=0.05)}


def serve_and_check(allocator_cls: type, **config) -> None:
    """Serve LENGTHS on the engine over allocator_cls, checking the pool's invariants after every step.
    The first request seen swapped out is aborted there, so free meets a swapped sequence."""
    engine = LLMEngine(device="cpu", simulate=True, parts=EngineParts(allocator=allocator_cls), **config)
    ids = [engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True)) for n in LENGTHS]
    bm = engine.scheduler.kv
    lengths, aborted = {}, None
    while engine.has_unfinished_requests():
        lengths |= {o.request_id: len(o.outputs[0].token_ids) for o in engine.step() if o.finished}
        bm.check_invariants()
        if aborted is None and bm.swapped:
            aborted = next(iter(bm.swapped))
            engine.abort(aborted)
            bm.check_invariants()
    assert any(step.preempted for step in engine.trace.steps), "the pool was meant to be small enough to preempt"
    if config.get("preemption_mode") == "swap":
        assert aborted is not None, "a request was meant to be swapped out (and aborted there)"
    assert {i: n for i, n in zip(ids, LENGTHS) if i != aborted} == {i: lengths.get(i) for i in ids if i != aborted}, \
        "every request not aborted generates all its max_tokens"
    usage = bm.usage()
    assert usage.free_blocks == usage.num_blocks, "every device block is free again once every request is done"
    assert usage.swapped_blocks == 0, "every swap block is free again once every request is done"


# --- task 1: can_allocate, allocate ---------------------------------------------------------------

def test_lesson04_task1_can_allocate_counts_the_blocks_a_new_sequence_needs():
    pool = graded(1)(8, 4)
    assert pool.can_allocate(32), "32 tokens need ceil(32 / 4) = 8 blocks, and 8 are free"
    assert not pool.can_allocate(33), "33 tokens need ceil(33 / 4) = 9 blocks, and only 8 are free"
    assert pool.can_allocate(1, reserve_tokens=32), "room for reserve_tokens=32 needs 8 blocks, and 8 are free"
    assert not pool.can_allocate(1, reserve_tokens=33), \
        "the blocks needed are ceil(max(num_tokens, reserve_tokens) / block_size): 9 for reserve_tokens=33"
    assert pool.can_allocate(24, keep_free=2), "6 blocks + keep_free=2 fit in 8"
    assert not pool.can_allocate(25, keep_free=2), "7 blocks + keep_free=2 do not fit in 8: keep_free blocks stay free"
    assert len(pool.free_blocks) == 8 and not pool.tables and not pool.num_tokens, "can_allocate changes nothing"


def test_lesson04_task1_allocate_takes_blocks_from_the_left_of_the_free_list():
    pool = graded(1)(8, 4)
    table = pool.allocate("a", 5)
    assert table == [0, 1], "5 tokens take ceil(5 / 4) = 2 blocks, the first two from the left of free_blocks"
    assert pool.tables.get("a") == [0, 1], "allocate records the table in tables[seq_id]"
    assert pool.num_tokens.get("a") == 5, "allocate records num_tokens[seq_id] = num_tokens"
    assert pool.allocate("b", 4, reserve_tokens=9) == [2, 3, 4], "reserve_tokens=9 takes ceil(9 / 4) = 3 blocks"
    assert pool.num_tokens.get("b") == 4, "num_tokens records the tokens, not the reserve"
    assert pool.ref_counts == [1, 1, 1, 1, 1, 0, 0, 0], "a block taken has ref count 1, a free block 0"
    assert list(pool.free_blocks) == [5, 6, 7], "the blocks taken leave free_blocks"


def test_lesson04_task1_allocate_refuses_a_sequence_that_has_blocks():
    bm = BlockManager(8, 4, num_swap_blocks=4, allocator=graded(1))
    bm.allocate("a", 5)
    must_raise(ValueError, "allocate of a sequence that already has a table raises ValueError", bm.allocate, "a", 1)
    bm.swap_out("a")
    must_raise(ValueError, "a swapped-out sequence has blocks too (in swapped): allocate raises ValueError",
               bm.allocate, "a", 1)
    bm.check_invariants()


def test_lesson04_task1_a_failed_allocate_takes_no_block():
    pool = graded(1)(4, 4)
    pool.allocate("a", 4)
    must_raise(NoFreeBlocks, "13 tokens need 4 blocks and 3 are free: allocate raises NoFreeBlocks",
               pool.allocate, "b", 13)
    assert list(pool.free_blocks) == [1, 2, 3] and pool.ref_counts == [1, 0, 0, 0], "a failed allocate takes no block"
    assert "b" not in pool.tables and "b" not in pool.num_tokens, "a failed allocate records nothing"


def test_lesson04_task1_contiguous_reservation_runs_through_your_allocate():
    bm = BlockManager(10, 4, reservation="contiguous", max_model_len=16, allocator=graded(1))
    assert len(bm.allocate("x", 1)) == 4, "contiguous: the BlockManager passes reserve_tokens=16, so 4 blocks"
    assert bm.num_tokens["x"] == 1, "num_tokens records the tokens, not the reserve"
    bm.check_invariants()


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task1_engine_serves_on_your_allocate(mode):
    serve_and_check(graded(1), **ENGINES[mode])


# --- task 2: can_append, append_slots -------------------------------------------------------------

def test_lesson04_task2_can_append_counts_only_the_blocks_to_add():
    pool = graded(2)(4, 4)
    PagedAllocator.allocate(pool, "a", 3)
    assert pool.can_append("a", 1, keep_free=3), "4 tokens in a 4-slot block need no new block, so none is missing"
    assert not pool.can_append("a", 2, keep_free=3), "the 5th token needs a new block, and keep_free=3 keeps all 3"
    assert pool.can_append("a", 13), "16 tokens fit in 4 blocks: 3 new ones, and 3 are free"
    assert not pool.can_append("a", 14), "17 tokens need 5 blocks: 4 new ones, and 3 are free"
    assert pool.tables["a"] == [0] and pool.num_tokens["a"] == 3, "can_append changes nothing"


def test_lesson04_task2_append_slots_adds_a_block_only_when_the_last_is_full():
    pool = graded(2)(4, 4)
    PagedAllocator.allocate(pool, "a", 3)
    assert pool.append_slots("a") == [0], \
        "append_slots adds a block only when the last one is full: 4 tokens in a 4-slot block need no new block"
    assert pool.num_tokens["a"] == 4, "append_slots adds num_new_tokens to num_tokens[seq_id]"
    assert pool.append_slots("a") == [0, 1], \
        "the 5th token needs a new block, taken from the left of free_blocks and put at the end of the table"
    assert pool.ref_counts[1] == 1 and 1 not in pool.free_blocks, "a block taken has ref count 1 and is not free"
    assert pool.append_slots("a", 7) == [0, 1, 2], "12 tokens fill exactly 3 blocks: one new block, not two"
    assert pool.tables["a"] == [0, 1, 2] and pool.num_tokens["a"] == 12, "tables and num_tokens hold the result"


def test_lesson04_task2_a_table_reserved_ahead_grows_without_new_blocks():
    pool = graded(2)(4, 4)
    PagedAllocator.allocate(pool, "a", 2, reserve_tokens=12)
    assert pool.append_slots("a", 10) == [0, 1, 2], \
        "a table reserved for 12 tokens takes no block until they outgrow it"
    assert pool.append_slots("a") == [0, 1, 2, 3], "the 13th token needs a 4th block"


def test_lesson04_task2_a_failed_append_takes_no_block():
    pool = graded(2)(4, 4)
    PagedAllocator.allocate(pool, "a", 12)
    must_raise(NoFreeBlocks, "17 tokens need 5 blocks and the pool has 4: append_slots raises NoFreeBlocks",
               pool.append_slots, "a", 5)
    assert pool.tables["a"] == [0, 1, 2] and list(pool.free_blocks) == [3], "a failed append_slots takes no block"
    assert pool.num_tokens["a"] == 12, "a failed append_slots leaves num_tokens as it was"


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task2_engine_serves_on_your_append_slots(mode):
    serve_and_check(graded(2), **ENGINES[mode])


# --- task 3: free --------------------------------------------------------------------------------

def check_free_on_the_device(allocator_cls: type) -> None:
    bm = BlockManager(6, 2, allocator=allocator_cls)
    PagedAllocator.allocate(bm.allocator, "a", 3)
    PagedAllocator.allocate(bm.allocator, "b", 2)
    PagedAllocator.append_slots(bm.allocator, "a", 2)   # a: [0, 1, 3], b: [2]
    bm.allocator.free("a")
    assert sorted(bm.free_blocks) == [0, 1, 3, 4, 5], "free gives every block of the table back to free_blocks"
    assert bm.ref_counts == [0, 0, 1, 0, 0, 0], "a block given back has ref count 0"
    assert "a" not in bm.tables and "a" not in bm.num_tokens, "free forgets the sequence: no tables or num_tokens entry"
    assert bm.tables == {"b": [2]} and bm.num_tokens == {"b": 2}, "free leaves the other sequences alone"
    bm.check_invariants()
    assert len(PagedAllocator.allocate(bm.allocator, "c", 10)) == 5, "the blocks given back serve again"


def check_free_of_a_swapped_sequence(allocator_cls: type) -> None:
    bm = BlockManager(6, 2, num_swap_blocks=4, allocator=allocator_cls)
    bm.allocate("a", 3)
    bm.allocate("b", 1)
    bm.swap_out("a")   # a's 2 blocks now sit in the CPU pool: swapped["a"], and no tables["a"]
    try:
        bm.allocator.free("a")
    except KeyError as error:
        raise AssertionError(f"free of a swapped sequence gives its CPU blocks back to free_swap_blocks, but it raised "
                             f"KeyError({error}): a swapped sequence has no tables entry, only swapped[seq_id]")
    assert sorted(bm.free_swap_blocks) == [0, 1, 2, 3], \
        "free of a swapped sequence gives its CPU blocks back to free_swap_blocks"
    assert "a" not in bm.swapped, "free of a swapped sequence forgets it in swapped"
    assert "a" not in bm.num_tokens, "free of a swapped sequence forgets its num_tokens entry"
    assert bm.tables == {"b": [2]} and len(bm.free_blocks) == 5, \
        "free of a swapped sequence leaves the device pool alone"
    bm.check_invariants()


def test_lesson04_task3_free_gives_every_device_block_back():
    check_free_on_the_device(graded(3))


def test_lesson04_task3_free_of_a_swapped_sequence_gives_its_cpu_blocks_back():
    check_free_of_a_swapped_sequence(graded(3))


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task3_engine_serves_on_your_free(mode):
    serve_and_check(graded(3), **ENGINES[mode])


class ForgetsTheSwapPool(PagedAllocator):
    """A free that does what "give every block back" says on the device, and leaks the swap pool."""

    def free(self, seq_id: str) -> None:
        for block in self.tables.pop(seq_id, []):
            self.ref_counts[block] -= 1
            self.free_blocks.append(block)
        del self.num_tokens[seq_id]


class TripsOnTheSwapPool(PagedAllocator):
    """The same, reading a table a swapped sequence does not have."""

    def free(self, seq_id: str) -> None:
        for block in self.tables.pop(seq_id):
            self.ref_counts[block] -= 1
            self.free_blocks.append(block)
        del self.num_tokens[seq_id]


@pytest.mark.parametrize("leaky", [ForgetsTheSwapPool, TripsOnTheSwapPool])
def test_grading_catches_a_free_that_ignores_the_swap_pool(leaky):
    """A negative control: a free blind to swapped sequences passes on the device, and task 3 fails it by name."""
    check_free_on_the_device(graded(3, leaky))
    rule = "free of a swapped sequence gives its CPU blocks back to free_swap_blocks"
    with pytest.raises(AssertionError, match=rule):
        check_free_of_a_swapped_sequence(graded(3, leaky))


def test_grading_catches_a_leaky_free_in_the_engine():
    """A negative control: the engine test of task 3 fails a free that leaves a swapped sequence behind."""
    with pytest.raises(AssertionError, match="does free give a swapped sequence's CPU blocks back"):
        serve_and_check(graded(3, ForgetsTheSwapPool), **ENGINES["swap"])
