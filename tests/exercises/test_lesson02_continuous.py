"""Lesson 02's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Each test runs only its own task's step from there; every other step is minicb's."""
from __future__ import annotations

from grading import add, decisions, obeying, run_both, simulated_engine

from minicb import course
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler.continuous import Step
from minicb.scheduler.output import SchedulerOutput

mine = course.lesson("lesson02_continuous")
PRESSURE = [(4, 9, 0), (5, 3, 0), (7, 14, 0), (3, 6, 0), (6, 11, 0), (2, 2, 0), (4, 8, 0)]


def decoding(n: int, prompt: int = 3, **config):
    """An engine whose n requests ran their prefill and now decode (each holds prompt + 1 tokens)."""
    engine = simulated_engine(**{"max_num_seqs": 8, "num_blocks": 32, "block_size": 4, **config})
    add(engine, [prompt] * n)
    engine.step()
    return engine.scheduler


def chunks(step: Step) -> list[tuple[str, int]]:
    return [(c.request_id, c.num_new_tokens) for c in step.out.chunks]


def check_each_running_request_gets_its_tokens_in_the_given_order(schedule_running):
    sched = decoding(3)
    order = [sched.running[2], sched.running[0], sched.running[1]]
    step = Step(SchedulerOutput(), token_budget=10)
    obeying("rules 2 and 4: each request gets sched.chunk_size tokens, recorded by sched.run",
            schedule_running, sched, step, order)
    assert chunks(step) == [("c", 1), ("a", 1), ("b", 1)], (
        "rules 2 and 4: each request in `requests` gets sched.chunk_size(req, step) tokens (1 for a decode), "
        "recorded with sched.run, in the order given")
    assert step.token_budget == 7, "sched.run takes each chunk's tokens from step.token_budget"


def check_a_request_whose_tokens_do_not_fit_gets_nothing(schedule_running):
    sched = decoding(3)
    step = Step(SchedulerOutput(), token_budget=1)
    obeying("rule 2: chunk_size 0 means nothing this step", schedule_running, sched, step, list(sched.running))
    assert chunks(step) == [("a", 1)], "rule 2: once the budget is spent, chunk_size is 0: the request gets nothing"
    assert not step.out.preempted, "rule 2: a request that gets no tokens needs no room: nobody is preempted for it"


def check_preempts_until_the_pool_holds_the_tokens(schedule_running):
    """Three decodes each need a new block and the pool of 3 has none free: a's token needs c to give
    way; then b needs a block, and b itself is the least urgent left, so b gives way."""
    sched = decoding(3, prompt=4, num_blocks=3)
    step = Step(SchedulerOutput(), token_budget=10)
    obeying("rules 1 and 3: make room with sched.make_room until sched.kv.can_append holds",
            schedule_running, sched, step, list(sched.running))
    assert step.out.preempted == ["c", "b"], (
        "rule 3: while the pool cannot hold a request's tokens, call sched.make_room(step), and check again")
    assert chunks(step) == [("a", 1)], (
        "rule 3: a request that make_room returned (it gave way itself) gets nothing; rule 1: a request preempted "
        "earlier in the step (c) gets nothing either")


def check_the_engine_runs_yours_under_pressure(schedule_running):
    yours, reference = run_both(EngineParts(schedule_running=schedule_running), PRESSURE,
                                max_num_seqs=6, num_blocks=12, block_size=4, max_model_len=48)
    assert any(decisions(reference, "preempted")), "the workload must put the pool under pressure"
    for what in ("admitted", "preempted"):
        assert decisions(yours, what) == decisions(reference, what), (
            f"with your schedule_running the engine {what} other requests than minicb's at some step: check the rules "
            "in its docstring")


def waiting(lengths: list[int], **config):
    engine = simulated_engine(**{"max_num_seqs": 4, "num_blocks": 32, "block_size": 4, **config})
    add(engine, lengths)
    return engine.scheduler


def admit(admit_waiting, sched, step: Step):
    return obeying("admit_waiting starts the head of sched.waiting with sched.start(req, n, step)",
                   admit_waiting, sched, step)


def check_nobody_jumps_the_line(admit_waiting):
    sched = waiting([10, 20, 5])
    step = Step(SchedulerOutput(), token_budget=29)
    blocked = admit(admit_waiting, sched, step)
    assert step.out.admitted == ["a"], (
        "c fits but may not start before b: FCFS stops at the first request that does not fit (rule 1)")
    assert blocked is not None and blocked.request_id == "b", "rule 1: return the request that could not start"


def check_a_request_needs_a_seat(admit_waiting):
    sched = waiting([3, 3, 3], max_num_seqs=2)
    step = Step(SchedulerOutput(), token_budget=100)
    blocked = admit(admit_waiting, sched, step)
    assert step.out.admitted == ["a", "b"], "rule 2: each request takes a seat; two seats"
    assert blocked is not None and blocked.request_id == "c", "rule 1: return the request that could not start"


def check_a_request_needs_its_blocks_and_leaves_keep_free(admit_waiting):
    sched = waiting([10, 20, 5], num_blocks=6)   # a takes 3 of 6 blocks; b needs 5; c would fit in 2
    step = Step(SchedulerOutput(), token_budget=100)
    admit(admit_waiting, sched, step)
    assert step.out.admitted == ["a"], (
        "rule 2: b's 20 tokens need 5 blocks and 3 are free, so b waits, and c may not jump it")
    sched = waiting([10], num_blocks=4)
    step = Step(SchedulerOutput(), token_budget=100, keep_free=2)
    admit(admit_waiting, sched, step)
    assert step.out.admitted == [], (
        "rule 2: a needs 3 of the 4 free blocks, but step.keep_free=2 of them are kept for decodes that run after "
        "admission: use sched.kv.can_allocate(n, keep_free=step.keep_free)")


def check_returns_none_when_everyone_started(admit_waiting):
    sched = waiting([3, 3])
    step = Step(SchedulerOutput(), token_budget=100)
    assert admit(admit_waiting, sched, step) is None and len(step.out.admitted) == 2, (
        "rule 3: the queue ran out: return None")
    assert admit(admit_waiting, sched, Step(SchedulerOutput(), token_budget=100)) is None, (
        "rule 3: an empty queue: return None")


def check_the_engine_admits_as_worked_out_by_hand(admit_waiting):
    """Two seats, max_tokens 3/1/2/2: request c takes the seat b freed at step 0, and d the seat
    a freed at step 2."""
    engine = simulated_engine(EngineParts(admit_waiting=admit_waiting), max_num_seqs=2, num_blocks=64)
    for i, n in enumerate((3, 1, 2, 2)):
        engine.add_request([10, 11], SamplingParams(max_tokens=n, ignore_eos=True), request_id=chr(97 + i))
    while engine.has_unfinished_requests():
        engine.step()
    assert decisions(engine, "admitted") == [["a", "b"], ["c"], [], ["d"], []], (
        "the engine must admit as first come, first served does when seats free up")


def check_the_engine_admits_yours_under_pressure(admit_waiting):
    yours, reference = run_both(EngineParts(admit_waiting=admit_waiting), PRESSURE,
                                max_num_seqs=4, num_blocks=12, block_size=4, max_model_len=48)
    assert decisions(yours, "admitted") == decisions(reference, "admitted"), (
        "with your admit_waiting the engine admitted other requests than minicb's at some step: check the rules")



# The graded tests: each check above on your function (tests/graders/test_lesson02_controls.py runs them on wrong ones).

def test_lesson02_task1_each_running_request_gets_its_tokens_in_the_given_order():
    check_each_running_request_gets_its_tokens_in_the_given_order(mine.schedule_running)


def test_lesson02_task1_a_request_whose_tokens_do_not_fit_gets_nothing():
    check_a_request_whose_tokens_do_not_fit_gets_nothing(mine.schedule_running)


def test_lesson02_task1_preempts_until_the_pool_holds_the_tokens():
    check_preempts_until_the_pool_holds_the_tokens(mine.schedule_running)


def test_lesson02_task1_the_engine_runs_yours_under_pressure():
    check_the_engine_runs_yours_under_pressure(mine.schedule_running)


def test_lesson02_task2_nobody_jumps_the_line():
    check_nobody_jumps_the_line(mine.admit_waiting)


def test_lesson02_task2_a_request_needs_a_seat():
    check_a_request_needs_a_seat(mine.admit_waiting)


def test_lesson02_task2_a_request_needs_its_blocks_and_leaves_keep_free():
    check_a_request_needs_its_blocks_and_leaves_keep_free(mine.admit_waiting)


def test_lesson02_task2_returns_none_when_everyone_started():
    check_returns_none_when_everyone_started(mine.admit_waiting)


def test_lesson02_task2_the_engine_admits_as_worked_out_by_hand():
    check_the_engine_admits_as_worked_out_by_hand(mine.admit_waiting)


def test_lesson02_task2_the_engine_admits_yours_under_pressure():
    check_the_engine_admits_yours_under_pressure(mine.admit_waiting)
