"""Lesson 02's task, graded on the implementation MINICB_IMPL picks (make test: the solutions). The plan
is checked against its contract on random states, then run by the engine in each configuration the
course uses, where every result must match minicb's."""
from __future__ import annotations

from dataclasses import replace

import pytest
import held_out
from grading import answer, contract_test, decisions, obeying, require, run_both, simulated_engine
from hypothesis import assume
from hypothesis import strategies as st

from minicb import course
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.course.contracts import PlanError, check_plan, lesson_needed
from minicb.course.passing import BURST, MAX_DELAY_STEPS, burst, first_token_steps
from minicb.scheduler.plan import StepState
from minicb.scheduler.plan import plan_step as minicbs_plan
from minicb.scheduler.preemption import choose_victim
from minicb.scheduler.request import RequestView

mine = course.lesson("lesson02_continuous")
PRESSURE = [(4, 9, 0), (5, 3, 0), (7, 14, 0), (3, 6, 0), (6, 11, 0), (2, 2, 0), (4, 8, 0)]


def blocks(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


@st.composite
def step_states(draw, lesson: int, order: str = "decode_first") -> StepState:
    """A random step, holding only what the lessons up to `lesson` teach. Lesson 02: running decodes, a line of
    prompts, tight seats and budget, a pool that never runs short. 04: a tight pool, which the running requests'
    next tokens still fit. 06: one they may not fit, and a line that holds prompts recomputed after a preemption.
    07: chunked prompts, blocks shared with other tables, a line whose members may have a prefix hit."""
    size, chunked = draw(st.sampled_from([2, 4])), lesson >= 7 and draw(st.booleans())
    num_running, num_line = draw(st.integers(0, 5)), draw(st.integers(0, 4))
    views, uncomputed, shared = [], {}, {}
    for i in range(num_running + num_line):
        running = i < num_running
        rid = chr(97 + i)
        todo = 1 if running and lesson < 7 else draw(st.sampled_from([1, 1, 1, 2, 3, 6, 9] if lesson >= 7
                                                                      else [1, 2, 3, 6, 9]))
        # Running ones often sit at a block boundary, where their next token needs a new block.
        computed = draw(st.sampled_from([size, 2 * size, 3 * size]) | st.integers(1, 12)) if running \
            else size * draw(st.integers(0, 2)) if lesson >= 7 else 0
        if lesson >= 7:   # decodes, and prompts being recomputed after a preemption (more than 1 to do)
            output = draw(st.integers(0, computed + todo - 1))
        elif running:     # a decode: its prompt and all but its last output token are computed
            output = draw(st.integers(1, computed))
        else:             # a new prompt, or (from lesson 06) one recomputed with its output so far
            output = draw(st.integers(0, todo - 1)) if lesson >= 6 else 0
        views.append(RequestView(rid, draw(st.integers(0, 2)), float(i), i, computed + todo - output, output,
                                 computed, 32))
        uncomputed[rid] = todo
        shared[rid] = draw(st.integers(0, blocks(computed, size))) if running and lesson >= 7 else 0

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
    state = StepState(running=tuple(draw(st.permutations(views[:num_running]))), line=tuple(views[num_running:]),
                      free_seats=draw(st.integers(0, 3)), token_budget=draw(st.integers(1, 14)),
                      free_blocks=draw(st.integers(0, 6)) if lesson >= 4 else 10**6, order=order, chunk=chunk,
                      blocks_to_grow=grow, blocks_to_start=start, blocks_freed_by=freed, choose_victim=choose_victim)
    assume(lesson_needed(state, minicbs_plan(state)) <= lesson)
    return state


def meets_the_contract(plan_step, state: StepState) -> None:
    plan = answer("plan_step", plan_step, state)
    try:
        check_plan(state, plan)
    except PlanError as error:
        raise AssertionError(str(error)) from None


def check_the_contract(plan_step, lesson: int, order: str = "decode_first", examples: int = 400) -> None:
    contract_test(lambda: plan_step, meets_the_contract, examples, state=step_states(lesson, order))()


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


ENGINES = {   # each configuration: the lessons that grade it, and the trace field it must exercise in some step
    "seats and budget": ((2,), dict(max_num_seqs=3, num_blocks=64, block_size=4, max_model_len=48,
                                    max_num_batched_tokens=10), "admitted"),
    "decode_first, preempting": ((4, 6), dict(max_num_seqs=6, num_blocks=12, block_size=4, max_model_len=48),
                                 "preempted"),
    "swapping": ((6,), dict(max_num_seqs=6, num_blocks=12, block_size=4, max_model_len=48, preemption_mode="swap"),
                 "swapped_in"),
    "priority": ((6,), dict(max_num_seqs=4, num_blocks=9, block_size=4, max_model_len=36, scheduling_policy="priority"),
                 "preempted"),
    "prefill_first, chunked": ((7,), dict(max_num_seqs=6, num_blocks=10, block_size=4, max_model_len=40,
                                          schedule_priority="prefill_first", enable_chunked_prefill=True,
                                          max_num_batched_tokens=8), "preempted"),
    "prefix caching": ((7,), dict(max_num_seqs=4, num_blocks=16, block_size=2, max_model_len=32,
                                  enable_prefix_caching=True, enable_chunked_prefill=True, max_num_batched_tokens=6),
                       "cached_tokens"),
}


def engines_of(lesson: int) -> list[str]:
    return [name for name, (lessons, _, _) in ENGINES.items() if lesson in lessons]


def check_the_engine_runs_yours(plan_step, name: str, lesson: int = 7):
    """The engine runs your plan where it needs no lesson after `lesson` (each step checked at the seam), and minicb's
    plan in the other steps; every request gets the tokens it gets with minicb's parts (run_both)."""
    workload = PRESSURE if name != "priority" else [(n, m, i % 3) for i, (n, m, _) in enumerate(PRESSURE)]
    _, config, exercised = ENGINES[name]
    yours, reference = obeying(f"the engine runs your plan ({name})",
                               lambda: run_both(EngineParts(plan_step=plan_step), workload, reached=lesson, **config))
    assert any(decisions(reference, exercised)), f"the {name} workload must exercise {exercised}"


def check_nobody_waits_much_longer(plan_step, seeds=held_out.PASSING_OVER):
    for seed in seeds:
        yours, reference = obeying("the engine runs your plan", lambda: run_both(
            EngineParts(plan_step=plan_step), [(n, m, 0) for n, m in burst(seed)], reached=2, **BURST))
        mine, fcfs = first_token_steps(yours), first_token_steps(reference)
        worst = max(fcfs, key=lambda r: mine[r] - fcfs[r])
        require(mine[worst] - fcfs[worst] <= MAX_DELAY_STEPS,
                f"rule 'delay': passing a request over may delay its first token by at most {MAX_DELAY_STEPS} steps; "
                f"on an unseen burst (seed {seed}), request {worst!r} got it in step {mine[worst]}, "
                f"{mine[worst] - fcfs[worst]} steps later than first come, first served gives it: the requests that "
                "passed it became decodes that kept taking the budget it needed")


# The graded tests: each check above on your function (tests/graders/test_lesson02_controls.py runs them on wrong
# ones). Lesson 02 grades the plan as lesson 02 teaches it; lessons 04, 06 and 07 grade the same function grown.

def test_lesson02_task1_meets_the_contract():
    check_the_contract(mine.plan_step, 2)


def test_lesson02_task1_nobody_waits_much_longer_than_first_come_first_served():
    check_nobody_waits_much_longer(mine.plan_step)


def test_lesson02_task1_the_engine_admits_as_worked_out_by_hand():
    check_the_engine_admits_as_worked_out_by_hand(mine.plan_step)


@pytest.mark.parametrize("name", engines_of(2))
def test_lesson02_task1_the_engine_runs_yours(name):
    check_the_engine_runs_yours(mine.plan_step, name, 2)


def test_lesson02_task1_a_wrong_plan_is_refused_with_its_rule():
    engine = simulated_engine(EngineParts(plan_step=lambda state: replace(mine.plan_step(state), victims=["z"])),
                              max_num_seqs=2, num_blocks=16)
    engine.add_request([10, 11], SamplingParams(max_tokens=2, ignore_eos=True), request_id="a")
    with pytest.raises(PlanError, match=r"the plan names \['z'\], which are not running"):
        engine.step()


def test_lesson04_task3_meets_the_contract():
    check_the_contract(mine.plan_step, 4)


@pytest.mark.parametrize("name", engines_of(4))
def test_lesson04_task3_the_engine_runs_yours(name):
    check_the_engine_runs_yours(mine.plan_step, name, 4)


def test_lesson06_task3_meets_the_contract():
    check_the_contract(mine.plan_step, 6)


@pytest.mark.parametrize("name", engines_of(6))
def test_lesson06_task3_the_engine_runs_yours(name):
    check_the_engine_runs_yours(mine.plan_step, name, 6)


@pytest.mark.parametrize("order", ["decode_first", "prefill_first"])
def test_lesson07_task3_meets_the_contract(order):
    check_the_contract(mine.plan_step, 7, order)


@pytest.mark.parametrize("name", engines_of(7))
def test_lesson07_task3_the_engine_runs_yours(name):
    check_the_engine_runs_yours(mine.plan_step, name, 7)
