"""Lesson 02's task, graded on the implementation MINICB_IMPL picks (make test: the solutions). The plan
is checked against its contract on random states, then run by the engine in each configuration the
course uses, where every result must match minicb's."""
from __future__ import annotations

from dataclasses import replace

import pytest
from grading import answer, contract_test, decisions, obeying, run_both, simulated_engine
from hypothesis import strategies as st

from minicb import course
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.course.contracts import PlanError, check_plan
from minicb.scheduler.plan import StepState
from minicb.scheduler.preemption import choose_victim
from minicb.scheduler.request import RequestView

mine = course.lesson("lesson02_continuous")
PRESSURE = [(4, 9, 0), (5, 3, 0), (7, 14, 0), (3, 6, 0), (6, 11, 0), (2, 2, 0), (4, 8, 0)]


def blocks(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


@st.composite
def step_states(draw, order: str) -> StepState:
    """A random step: running requests holding blocks (some shared, so giving way frees fewer), a line
    whose members may have a prefix hit, tight seats, budget and pool, whole or chunked prompts."""
    size, chunked = draw(st.sampled_from([2, 4])), draw(st.booleans())
    num_running, num_line = draw(st.integers(0, 5)), draw(st.integers(0, 4))
    views, uncomputed, shared = [], {}, {}
    for i in range(num_running + num_line):
        rid, todo = chr(97 + i), draw(st.sampled_from([1, 1, 1, 2, 3, 6, 9]))
        # Running ones often sit at a block boundary, where their next token needs a new block.
        computed = draw(st.sampled_from([size, 2 * size, 3 * size]) | st.integers(1, 12)) if i < num_running \
            else size * draw(st.integers(0, 2))
        # Some have output tokens: decodes, and prompts being recomputed after a preemption (more than 1 to do).
        output = draw(st.integers(0, computed + todo - 1))
        views.append(RequestView(rid, draw(st.integers(0, 2)), float(i), i, computed + todo - output, output,
                                 computed, 32))
        uncomputed[rid] = todo
        shared[rid] = draw(st.integers(0, blocks(computed, size))) if i < num_running else 0

    def by_id(rid: str) -> RequestView:
        return next(v for v in views if v.request_id == rid)

    def chunk(rid: str, budget: int, step_is_empty: bool) -> int:
        todo = uncomputed[rid]
        if chunked:
            return max(0, min(todo, budget))
        return todo if todo <= budget or step_is_empty else 0

    def grow(rid: str, n: int) -> int:
        c = by_id(rid).num_computed_tokens
        return blocks(c + n, size) - blocks(c, size)

    def start(rid: str, n: int) -> int:
        c = by_id(rid).num_computed_tokens
        return blocks(c + n, size) - c // size

    def freed(rid: str) -> int:
        return blocks(by_id(rid).num_computed_tokens, size) - shared[rid]

    # The running requests run in the order they started, which under priorities is not serving order.
    return StepState(running=tuple(draw(st.permutations(views[:num_running]))), line=tuple(views[num_running:]),
                     free_seats=draw(st.integers(0, 3)), token_budget=draw(st.integers(1, 14)),
                     free_blocks=draw(st.integers(0, 6)), order=order, chunk=chunk, blocks_to_grow=grow,
                     blocks_to_start=start, blocks_freed_by=freed, choose_victim=choose_victim)


def meets_the_contract(plan_step, state: StepState) -> None:
    plan = answer("plan_step", plan_step, state)
    try:
        check_plan(state, plan)
    except PlanError as error:
        raise AssertionError(str(error)) from None


def check_the_contract(plan_step, order: str, examples: int = 400) -> None:
    contract_test(lambda: plan_step, meets_the_contract, examples, state=step_states(order))()


def check_the_engine_admits_as_worked_out_by_hand(plan_step):
    """Two seats, max_tokens 3/1/2/2: request c takes the seat b freed at step 0, and d the seat
    a freed at step 2."""
    engine = simulated_engine(EngineParts(plan_step=plan_step), max_num_seqs=2, num_blocks=64)
    for i, n in enumerate((3, 1, 2, 2)):
        engine.add_request([10, 11], SamplingParams(max_tokens=n, ignore_eos=True), request_id=chr(97 + i))
    while engine.has_unfinished_requests():
        obeying("the engine applies your plan", engine.step)
    assert decisions(engine, "admitted") == [["a", "b"], ["c"], [], ["d"], []], (
        "the engine must admit as first come, first served does when seats free up")


ENGINES = {   # each configuration, and what it must exercise: the trace field that is non-empty in some step
    "decode_first, preempting": (dict(max_num_seqs=6, num_blocks=12, block_size=4, max_model_len=48), "preempted"),
    "prefill_first, chunked": (dict(max_num_seqs=6, num_blocks=10, block_size=4, max_model_len=40,
                                    schedule_priority="prefill_first", enable_chunked_prefill=True,
                                    max_num_batched_tokens=8), "preempted"),
    "swapping": (dict(max_num_seqs=6, num_blocks=12, block_size=4, max_model_len=48, preemption_mode="swap"),
                 "swapped_in"),
    "prefix caching": (dict(max_num_seqs=4, num_blocks=16, block_size=2, max_model_len=32, enable_prefix_caching=True,
                            enable_chunked_prefill=True, max_num_batched_tokens=6), "cached_tokens"),
    "priority": (dict(max_num_seqs=4, num_blocks=9, block_size=4, max_model_len=36, scheduling_policy="priority"),
                 "preempted"),
}


def check_the_engine_runs_yours(plan_step, name: str):
    workload = PRESSURE if name != "priority" else [(n, m, i % 3) for i, (n, m, _) in enumerate(PRESSURE)]
    config, exercised = ENGINES[name]
    yours, reference = obeying(f"the engine runs your plan ({name})",
                               lambda: run_both(EngineParts(plan_step=plan_step), workload, **config))
    assert any(decisions(reference, exercised)), f"the {name} workload must exercise {exercised}"
    for what in ("admitted", "preempted", "swapped_in"):
        assert decisions(yours, what) == decisions(reference, what), (
            f"with your plan_step the engine {what} other requests than minicb's at some step ({name})")


# The graded tests: each check above on your function (tests/graders/test_lesson02_controls.py runs them on wrong ones).

def test_lesson02_task1_meets_the_contract_decode_first():
    check_the_contract(mine.plan_step, "decode_first")


def test_lesson02_task1_meets_the_contract_prefill_first():
    check_the_contract(mine.plan_step, "prefill_first")


def test_lesson02_task1_the_engine_admits_as_worked_out_by_hand():
    check_the_engine_admits_as_worked_out_by_hand(mine.plan_step)


@pytest.mark.parametrize("name", ENGINES)
def test_lesson02_task1_the_engine_runs_yours(name):
    check_the_engine_runs_yours(mine.plan_step, name)


def test_lesson02_task1_a_wrong_plan_is_refused_with_its_rule():
    engine = simulated_engine(EngineParts(plan_step=lambda state: replace(mine.plan_step(state), victims=["z"])),
                              max_num_seqs=2, num_blocks=16)
    engine.add_request([10, 11], SamplingParams(max_tokens=2, ignore_eos=True), request_id="a")
    with pytest.raises(PlanError, match=r"the plan names \['z'\], which are not running"):
        engine.step()
