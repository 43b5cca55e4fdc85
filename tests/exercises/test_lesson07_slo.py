"""Lesson 07's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions)."""
from __future__ import annotations

import pytest
from grading import ids, obeying, run_both, simulated_engine

from minicb import course
from minicb.config import EngineConfig
from minicb.parts import EngineParts
from minicb.scheduler.continuous import Step
from minicb.scheduler.output import ScheduledChunk, SchedulerOutput
from minicb.slo import SloTarget, grade_slo

mine = course.lesson("lesson07_slo")


def size(todo: int, budget: int, chunked: bool, threshold: int = 0, empty: bool = False) -> int:
    """chunk_size for a request with `todo` uncomputed tokens, `budget` tokens left in the step."""
    engine = simulated_engine(enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold)
    req = engine.make_request(ids(todo))
    step = Step(SchedulerOutput(), budget)
    if not empty:   # something else already runs in this step
        step.out.chunks.append(ScheduledChunk(engine.make_request(ids(2)), 1))
    return obeying("chunk_size reads sched.uncomputed(req), step.token_budget, step.is_empty and sched.config",
                   mine.chunk_size, engine.scheduler, req, step)


@pytest.mark.parametrize("todo,budget,want", [(1, 5, 1), (1, 0, 0), (40, 100, 40), (40, 40, 40), (40, 39, 0)])
def test_lesson07_task1_without_chunking_a_request_runs_whole_or_waits(todo, budget, want):
    assert size(todo, budget, chunked=False) == want, (
        f"rule 2: without chunked prefill, {todo} uncomputed tokens with {budget} left run whole (todo <= budget) "
        "or not at all (0)")


def test_lesson07_task1_an_empty_step_takes_a_request_past_the_budget():
    assert size(40, 16, chunked=False, empty=True) == 40, (
        "rule 3: in a step that runs nothing yet, a request larger than the budget runs whole, so it cannot starve")
    assert size(40, 16, chunked=False, empty=False) == 0, "rule 3: only an empty step may overflow the budget"


@pytest.mark.parametrize("todo,budget,threshold,want", [
    (40, 100, 0, 40),    # all of it fits
    (40, 16, 0, 16),     # as much as the budget leaves
    (40, 100, 8, 8),     # at most the threshold
    (5, 100, 8, 5),      # the rest of a prompt, under the threshold
    (40, 0, 8, 0),       # nothing left this step
    (1, 3, 2, 1),        # a decode
])
def test_lesson07_task1_chunked_prefill_takes_what_fits(todo, budget, threshold, want):
    assert size(todo, budget, chunked=True, threshold=threshold) == want, (
        f"rule 1: with chunked prefill, {todo} uncomputed tokens, {budget} left in the step and "
        f"long_prefill_token_threshold={threshold} (0: no cap) give min(todo, budget, threshold)")
    assert size(todo, budget, chunked=True, threshold=threshold, empty=True) == want, (
        "rule 1: with chunked prefill even an empty step stays within the budget: chunks never overflow it")


def test_lesson07_task1_the_engine_chunks_with_yours():
    workload = [(60, 4, 0), (3, 12, 0), (45, 6, 0), (4, 10, 0), (30, 3, 0)]
    budget, threshold = 24, 16
    yours, _ = run_both(EngineParts(chunk_size=mine.chunk_size), workload, max_num_seqs=4, num_blocks=64,
                        block_size=4, enable_chunked_prefill=True, max_num_batched_tokens=budget,
                        long_prefill_token_threshold=threshold)
    steps = yours.trace.steps
    assert all(s.num_tokens <= budget for s in steps), "no step may run more than max_num_batched_tokens"
    assert max(n for s in steps for n in s.tokens.values()) == threshold, (
        "each prompt chunk is at most long_prefill_token_threshold tokens, and the long prompts use it whole")
    assert sum(s.decode_tokens > 0 and s.prefill_tokens > 0 for s in steps) > 0, (
        "decodes keep flowing while long prompts prefill in chunks")


def test_lesson07_task2_your_configuration_meets_the_slo():
    config = mine.slo_config()
    EngineConfig(**config)   # a misspelt or invalid knob fails here, by name
    report = grade_slo(config)
    target = SloTarget()
    assert report.ttft_p99_s <= target.ttft_p99_s, f"p99 time to first token is over the target: {report}"
    assert report.itl_p99_s <= target.itl_p99_s, f"p99 inter-token latency is over the target: {report}"
    assert report.rejected <= target.max_rejected_fraction * (report.served + report.rejected), (
        f"more than {target.max_rejected_fraction:.0%} of the requests were turned away: {report}")
    assert report.met, f"the SLO is not met: {report}"
