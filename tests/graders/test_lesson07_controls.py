"""Lesson 07's grader catches plausible mistakes: each wrong chunk_size below must fail the rule it breaks."""
from __future__ import annotations

from dataclasses import replace

import pytest
from test_lesson07_slo import check_meets_slo, chunk_size_contract

from minicb.course.slo import grade_slo
from minicb.parts import EngineParts
from minicb.scheduler.chunking import chunk_size


def no_exception_for_an_empty_step(uncomputed, budget, step_is_empty, config):
    return chunk_size(uncomputed, budget, False, config)


def ignores_the_threshold(uncomputed, budget, step_is_empty, config):
    return chunk_size(uncomputed, budget, step_is_empty, replace(config, long_prefill_token_threshold=0))


def overflows_with_chunking_too(uncomputed, budget, step_is_empty, config):
    if step_is_empty:
        return uncomputed
    return chunk_size(uncomputed, budget, step_is_empty, config)


def negative_when_the_budget_is_spent(uncomputed, budget, step_is_empty, config):
    if config.enable_chunked_prefill:
        return min(uncomputed, budget, config.long_prefill_token_threshold or uncomputed)
    return chunk_size(uncomputed, budget, step_is_empty, config)


def half_a_budget_to_be_safe(uncomputed, budget, step_is_empty, config):
    if config.enable_chunked_prefill:
        return min(chunk_size(uncomputed, budget, step_is_empty, config), max(1, budget // 2))
    return chunk_size(uncomputed, budget, step_is_empty, config)


def at_least_one_token_to_make_progress(uncomputed, budget, step_is_empty, config):
    return max(1, chunk_size(uncomputed, budget, step_is_empty, config))


def the_threshold_without_chunking_too(uncomputed, budget, step_is_empty, config):
    cap = config.long_prefill_token_threshold or uncomputed
    return chunk_size(min(uncomputed, cap), budget, step_is_empty, config)


def whole_whenever_it_is_never_split(uncomputed, budget, step_is_empty, config):
    return chunk_size(uncomputed, budget, True, config)


@pytest.mark.parametrize("wrong,rule", [
    (no_exception_for_an_empty_step, "must not stall the engine for good"),
    (ignores_the_threshold, "never exceeds long_prefill_token_threshold"),
    (overflows_with_chunking_too, "keeps to its budget"),
    (negative_when_the_budget_is_spent, "an int from 0 to uncomputed"),
    (half_a_budget_to_be_safe, "nothing is held back|keeps to its budget"),
    (lambda uncomputed, budget, step_is_empty, config: float(chunk_size(uncomputed, budget, step_is_empty, config)),
     "an int"),
    (at_least_one_token_to_make_progress, "keeps to its budget"),
    (the_threshold_without_chunking_too, "never split"),
    (whole_whenever_it_is_never_split, "keeps to its budget"),
])
def test_a_wrong_chunk_size_fails_its_contract(wrong, rule):
    with pytest.raises(AssertionError, match=rule):
        chunk_size_contract(lambda: wrong)()


def test_the_reference_passes():
    chunk_size_contract(lambda: chunk_size)()


@pytest.mark.parametrize("config,rule", [
    ({}, "p99 time to first token is over the target"),
    (dict(enable_chunked_prefill=True, max_num_batched_tokens=128), "p99 time to first token is over the target"),
    (dict(max_num_seqs=64, max_waiting=16), "p99 inter-token latency is over the target"),
])
def test_a_configuration_that_fixes_one_cause_only_misses_the_slo(config, rule):
    """The default; short steps without a bound on the queue; a bounded queue with long prompts unchunked."""
    with pytest.raises(AssertionError, match=rule):
        check_meets_slo(config)


def test_a_configuration_tuned_to_the_lessons_workload_misses_an_unseen_one():
    """A queue bound short enough for seed 0's TTFT, and no longer, turns away too many on a burstier workload:
    the unseen seeds are what tell a tuned answer from a robust one."""
    tuned = dict(enable_chunked_prefill=True, max_num_batched_tokens=128, max_num_seqs=64, max_waiting=16)
    assert grade_slo(tuned, parts=EngineParts(), seed=0).met
    with pytest.raises(AssertionError, match="of the requests were turned away on held-out workload 3 of 5"):
        check_meets_slo(tuned)
