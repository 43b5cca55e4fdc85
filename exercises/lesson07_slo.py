"""Lesson 07: scheduling for latency targets. minicb.course.slo holds the problem: a bursty workload with a
few long documents, arriving faster than the default configuration serves, and an SLO (p99 TTFT,
p99 inter-token latency, and at most a tenth of the requests turned away).

Task 1  chunk_size   pytest tests/exercises -k lesson07_task1
Task 2  slo_config   pytest tests/exercises -k lesson07_task2
Task 3  plan_step, grown: edit yours in exercises/lesson02_continuous.py
                     pytest tests/exercises -k lesson07_task3
        Two things change. First, state.chunk(request_id, budget_left, step_is_empty) now says how many
        tokens a request runs: ask it for every request you give tokens to, with the budget left to it; it
        may cut a prompt, or give 0. Second, state.order says whom the budget serves first. decode_first:
        as before. prefill_first: the running prompts, then the newcomers, then the running decodes; a
        newcomer never takes the blocks a running decode will need. Lesson 06's rules still hold.

The scheduler calls chunk_size for every request it gives tokens to (minicb's own is in
minicb/scheduler/chunking.py; `course.llm(lesson=7)` plugs yours in). The simulator grades
slo_config: `minicb.course.slo.grade_slo(slo_config())`.
"""
from __future__ import annotations

from minicb.config import EngineConfig


def chunk_size(uncomputed: int, budget: int, step_is_empty: bool, config: EngineConfig) -> int:
    """How many of a request's uncomputed tokens run this step (0: none). The scheduler asks for every
    request it gives tokens to, running or starting, in the order it fills the step.

    It may read: uncomputed, the request's tokens not yet in the cache (1 for a decode; a prompt, the rest
    of one, or a preempted request's whole context for a prefill); budget, what is left of the step's
    max_num_batched_tokens (0 or below once it is spent: a step may overflow it); step_is_empty, whether
    the step runs nothing yet (its whole budget, at least 1, is then left); config.enable_chunked_prefill
    and config.long_prefill_token_threshold (0: no cap).

    The contract (the tests check each rule on random cases, and name the one an answer breaks):
    - the answer is an int from 0 to uncomputed;
    - without chunked prefill a request is never split; with it, a piece never exceeds
      long_prefill_token_threshold when there is one;
    - the step keeps to its budget, and the engine never stalls for good: every request runs some day,
      whatever its size and the budget;
    - nothing is held back that these rules let run: a token left out wastes the step's room and delays
      the request.
    """
    raise NotImplementedError("Lesson 07, task 1: chunk_size: how many of a request's tokens run this step. "
                              "Check it with: pytest tests/exercises -k lesson07_task1")


def slo_config() -> dict:
    """EngineConfig overrides that meet minicb.stats.goodput.SloTarget() on minicb.course.slo.slo_workload(seed), for
    the lesson's seed and for others like it. The knobs that matter: max_num_seqs, max_num_batched_tokens,
    enable_chunked_prefill, long_prefill_token_threshold, schedule_priority, max_waiting, max_queue_delay_s.

    Try yours with minicb.course.slo.grade_slo(slo_config(), seed=s) on minicb.course.slo.PRACTICE_SEEDS, the
    lesson's seed 0 among them. The test grades it on workloads drawn the same way from seeds you have not
    seen, each one that the reference answer's configuration serves (minicb's own parts run them, so this
    task does not wait for task 1). The draws differ in their bursts: a configuration that meets the SLO on
    one seed can turn away too many on another, and some seeds (3, for one) bring bursts that no
    configuration tried serves within the SLO."""
    raise NotImplementedError("Lesson 07, task 2: slo_config: a configuration that meets the SLO. "
                              "Check it with: pytest tests/exercises -k lesson07_task2")
