"""Lesson 02's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions)."""
from __future__ import annotations

import pytest

from minicb import course
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.request import RequestStatus
from minicb.sampling import SamplingParams
from minicb.scheduler.continuous import QueuedRequest

mine = course.lesson("lesson02_continuous")


def simulated_engine(lengths: list[int], max_num_seqs: int, parts: EngineParts) -> LLMEngine:
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=max_num_seqs, num_blocks=64, parts=parts)
    for n in lengths:
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True))
    return engine


def test_lesson02_task1_finished_requests_leave_and_no_others():
    engine = simulated_engine([4, 4, 4, 4], 4, EngineParts())
    engine.step()
    running = list(engine.scheduler.running)
    running[1].status, running[3].status = RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH
    assert mine.requests_that_leave(running) == [running[1], running[3]]
    assert mine.requests_that_leave(running[:1]) == []


def test_lesson02_task1_each_result_returns_the_step_it_finishes():
    """A request of k tokens gets its first at the prefill step 0 and its last at step k-1: it must
    come back then, not when the longest one ends."""
    lengths = [2, 6, 3, 1]
    engine = simulated_engine(lengths, 4, EngineParts(requests_that_leave=mine.requests_that_leave))
    returned_at = {}
    step = 0
    while engine.has_unfinished_requests():
        returned_at.update({o.request_id: step for o in engine.step() if o.finished})
        step += 1
    assert returned_at == {str(i): n - 1 for i, n in enumerate(lengths)}


QUEUE = [QueuedRequest("a", 10, 1), QueuedRequest("b", 20, 2), QueuedRequest("c", 5, 1)]


@pytest.mark.parametrize("free_seats,token_budget,free_blocks,step_is_empty,want", [
    (3, 100, 10, False, ["a", "b", "c"]),
    (2, 100, 10, False, ["a", "b"]),          # seats run out
    (3, 29, 10, False, ["a"]),                # b's 20 tokens overflow; c would fit but may not jump b
    (3, 100, 2, False, ["a"]),                # b needs 2 blocks, 1 is left
    (3, 35, 4, False, ["a", "b", "c"]),       # exactly full
    (3, 5, 10, True, ["a"]),                  # an empty step takes the head even over budget
    (3, 5, 10, False, []),
    (0, 100, 10, True, []),
    (3, 100, 0, True, []),
])
def test_lesson02_task2_admits_the_head_of_the_queue_that_fits(free_seats, token_budget, free_blocks,
                                                               step_is_empty, want):
    assert mine.plan_admissions(QUEUE, free_seats, token_budget, free_blocks, step_is_empty) == want
    assert mine.plan_admissions([], free_seats, token_budget, free_blocks, step_is_empty) == []


def test_lesson02_task2_the_engine_admits_as_planned():
    """Two seats, lengths 3/1/2/2: worked out by hand, request 2 takes the seat request 1 freed at
    step 0, and request 3 the seats freed at step 2."""
    engine = simulated_engine([3, 1, 2, 2], 2, EngineParts(plan_admissions=mine.plan_admissions))
    while engine.has_unfinished_requests():
        engine.step()
    assert [s.admitted for s in engine.trace.steps] == [["0", "1"], ["2"], [], ["3"], []]
