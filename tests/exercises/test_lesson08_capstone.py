"""Lesson 08's task, graded on the implementation MINICB_IMPL picks (make test: the solutions).

The reference's rate is not stored: the reference's own search runs here (about 15 s on the simulator),
so the bar follows the engine and its step cost. Each answer is computed once per process.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import held_out
import pytest
from grading import reference_lesson

from minicb import course
from minicb.course.capstone import (RATE_SHARE, CapstoneGrade, CapstoneProblem, answer_error, grade,
                                    short_of_the_reference)

mine = course.lesson("lesson08_capstone")


def reference():
    return reference_lesson("lesson08_capstone")


PROBLEM = CapstoneProblem()


@functools.cache
def answer_of(capstone: Callable[[CapstoneProblem], object]) -> object:
    """capstone(PROBLEM), once: with MINICB_IMPL=solutions yours is the reference, and the search runs once."""
    return capstone(PROBLEM)


def valid_answer() -> tuple[dict, float]:
    answer = answer_of(mine.capstone)
    error = answer_error(answer)
    assert error is None, f"rule 1: {error}"
    return answer


@functools.cache
def graded() -> CapstoneGrade:
    """Your answer run on the unseen seeds. Its rate is judged against the reference's in rule 3's check,
    so that rule 2 needs no reference."""
    return grade(valid_answer(), None, held_out.CAPSTONE)


def test_lesson08_task1_the_answer_is_a_configuration_and_a_rate():
    valid_answer()


def test_lesson08_task1_your_rate_keeps_the_slo_on_unseen_seeds():
    slo_failure = graded().slo_failure
    assert slo_failure is None, (
        f"rule 2: {slo_failure}. Every one of the {len(held_out.CAPSTONE)} held-out workloads must meet it: "
        "answer with a safety margin below the highest rate you found on the practice seeds")


def test_lesson08_task1_your_rate_is_at_least_90_percent_of_the_references(record_property):
    _, rate = valid_answer()
    _, reference_rate = answer_of(reference().capstone)
    rate_failure = short_of_the_reference(rate, reference_rate)
    assert rate_failure is None, (
        f"rule 3: {rate_failure}. Tune the configuration (lesson 07's knobs) until its highest rate is "
        "higher, or search closer to it")
    record_property("margin", f"your rate {rate:.1f} req/s is {rate / reference_rate:.0%} of the reference's "
                              f"{reference_rate:.1f} (at least {RATE_SHARE:.0%})")


# The grading itself, on no learner code.

def test_the_grading_seeds_catch_a_rate_overfit_to_the_practice_seeds():
    """The reference's configuration at the highest rate its search found, without its margin, keeps the
    SLO on every practice seed and must fail on an unseen one: else the unseen seeds test nothing."""
    config, rate = answer_of(reference().capstone)
    edge = rate / (1 - reference().MARGIN)
    result = grade((config, edge), rate, held_out.CAPSTONE)
    assert result.rate_failure is None and result.slo_failure is not None, (
        f"the held-out workloads no longer catch an answer at the practice seeds' edge ({edge:.1f} req/s): "
        "add held-out seeds or re-measure the reference's margin")
    assert RATE_SHARE * edge > rate, "the reference's margin is so wide that overfitting would pass the rate rule"


@pytest.mark.parametrize("answer,rule", [
    (None, "return a pair (config, rate)"),
    (({"max_num_seqs": 64}, "fast"), "the rate must be a finite number"),
    (({"max_num_seqs": 64}, float("inf")), "the rate must be a finite number"),
    (({"max_num_seqs": 64}, 0.0), "the rate must be a finite number"),
    ((("max_num_seqs", 64), 20.0), "must be a dict of EngineConfig overrides"),
    (({"num_blocks": 100_000}, 20.0), "sets num_blocks: the problem fixes those"),
    (({"step_cost": None, "simulate": True}, 20.0), "sets simulate, step_cost: the problem fixes those"),
    (({"max_num_seqs": 0}, 20.0), "not a valid EngineConfig: EngineConfig.max_num_seqs=0 is invalid"),
    (({"max_num_sequences": 64}, 20.0), "sets max_num_sequences"),
])
def test_the_grader_refuses_answers_it_cannot_run(answer, rule):
    result = grade(answer, 20.0, held_out.CAPSTONE)
    assert not result.passed and rule in (result.answer_error or ""), result
