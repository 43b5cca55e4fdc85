"""Lesson 07's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions)."""
from __future__ import annotations

import held_out
from grading import answer, contract_test, require, run_both
from hypothesis import example
from hypothesis import strategies as st

from minicb import course
from minicb.config import EngineConfig
from minicb.course.slo import SloReport, grade_slo
from minicb.parts import EngineParts
from minicb.scheduler.chunking import chunk_size as minicb_chunk_size
from minicb.stats.goodput import SloTarget

mine = course.lesson("lesson07_slo")


def check_chunk_size(decide, uncomputed: int, budget: int, step_is_empty: bool, chunked: bool, threshold: int) -> None:
    """chunk_size's contract on one case, each rule by name."""
    config = EngineConfig(enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold)
    n = answer("chunk_size reads uncomputed, budget, step_is_empty and config", decide, uncomputed, budget,
               step_is_empty, config)
    case = (f"{uncomputed} uncomputed tokens, {budget} left of the step's budget, a step that "
            f"{'runs nothing yet' if step_is_empty else 'already runs something'}, enable_chunked_prefill={chunked}, "
            f"long_prefill_token_threshold={threshold}")
    assert isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= uncomputed, (
        f"rule: the answer is an int from 0 to uncomputed; it was {n!r}. Case: {case}")
    if not chunked:
        assert n in (0, uncomputed), f"rule: without chunked prefill a request is never split; {n}. Case: {case}"
    elif threshold:
        assert n <= threshold, f"rule: a piece never exceeds long_prefill_token_threshold; it got {n}. Case: {case}"
    never_fits = not chunked and uncomputed > budget   # unsplit, it fits no budget this step has left
    if never_fits and step_is_empty:
        assert n == uncomputed, (
            f"rule: keeping to the budget must not stall the engine for good: a step that runs nothing yet has its "
            f"whole budget, and this request, never split, fits no step's; it got {n}. Case: {case}")
        return
    assert n <= max(budget, 0), (
        f"rule: the step keeps to its budget ({max(budget, 0)} left) unless keeping to it would stall the engine for "
        f"good, and here it would not: a later step can take the request; it got {n}. Case: {case}")
    largest = minicb_chunk_size(uncomputed, budget, step_is_empty, config)   # the most the rules let run
    assert n == largest, (f"rule: nothing is held back that the rules let run: {largest} tokens may run; it got {n}. "
                          f"Case: {case}")


# Cases every run tries first: a spent budget in a busy step, with and without chunking; a decode with no budget
# left; a chunk exactly the budget and the threshold; an unsplit request bigger than an empty step's whole budget.
FIRST_CASES = [(1, 0, False, True, 0), (1, 0, False, False, 0), (1, 0, False, True, 8),
               (16, 16, False, True, 16), (17, 16, False, True, 16), (40, 16, False, False, 0),
               (40, 16, True, False, 0), (40, 16, True, True, 0), (30, -3, False, True, 0)]


@st.composite
def budget_and_emptiness(draw):
    """What is left of the budget, and whether the step runs nothing yet: an empty step has its whole budget,
    at least 1 (a busy one may have spent it, or overflowed it)."""
    step_is_empty = draw(st.booleans())
    return draw(st.integers(1 if step_is_empty else -4, 300)), step_is_empty


def chunk_size_contract(decide):
    def check(decide, uncomputed, budget_step, chunked, threshold):
        check_chunk_size(decide, uncomputed, *budget_step, chunked, threshold)

    contract = contract_test(decide, check, 300, uncomputed=st.integers(1, 300), budget_step=budget_and_emptiness(),
                             chunked=st.booleans(), threshold=st.sampled_from([0, 0, 1, 8, 16, 64]))
    for uncomputed, budget, step_is_empty, chunked, threshold in reversed(FIRST_CASES):
        contract = example(uncomputed=uncomputed, budget_step=(budget, step_is_empty), chunked=chunked,
                           threshold=threshold)(contract)
    return contract


test_lesson07_task1_the_contract_on_random_cases = chunk_size_contract(lambda: mine.chunk_size)


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


def check_meets_slo(config: dict) -> list[SloReport]:
    """The configuration on every held-out workload, each rule by name."""
    EngineConfig(**config)   # a misspelt or invalid knob fails here, by name
    seeds = held_out.SLO_CONFIG
    target, reports = SloTarget(), []
    for index, seed in enumerate(seeds):
        # minicb's own parts, on purpose: task 2 does not wait for task 1
        report = grade_slo(config, parts=EngineParts(), seed=seed)
        on = f"on {held_out.place(index, seeds)}: {report}"
        require(report.ttft_p99_s <= target.ttft_p99_s, f"p99 time to first token is over the target {on}")
        require(report.itl_p99_s <= target.itl_p99_s, f"p99 inter-token latency is over the target {on}")
        require(report.rejected <= target.max_rejected_fraction * (report.served + report.rejected),
                f"more than {target.max_rejected_fraction:.0%} of the requests were turned away {on}")
        require(report.met, f"the SLO is not met {on}")
        reports.append(report)
    return reports


def test_lesson07_task2_your_configuration_meets_the_slo(record_property):
    reports = check_meets_slo(mine.slo_config())
    target = SloTarget()
    record_property("margin", (
        f"on {len(reports)} held-out workloads, worst p99 TTFT {max(r.ttft_p99_s for r in reports):.2f} s (target "
        f"{target.ttft_p99_s:.2f}), worst p99 ITL {max(r.itl_p99_s for r in reports) * 1e3:.1f} ms (target "
        f"{target.itl_p99_s * 1e3:.0f}), most turned away {max(r.rejected for r in reports)} of "
        f"{reports[0].served + reports[0].rejected}"))
