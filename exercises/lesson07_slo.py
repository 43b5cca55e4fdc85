"""Lesson 07: scheduling for latency targets. minicb.slo holds the problem: a bursty workload with a
few long documents, arriving faster than the default configuration serves, and an SLO (p99 TTFT,
p99 inter-token latency, and at most a tenth of the requests turned away).

Task 1  chunk_size   pytest tests/exercises -k lesson07_task1
Task 2  slo_config   pytest tests/exercises -k lesson07_task2

The scheduler calls chunk_size for every request it gives tokens to (minicb's own is in
minicb/scheduler/chunking.py; `course.llm(lesson=7)` plugs yours in). The simulator grades
slo_config: `minicb.slo.grade_slo(slo_config())`.
"""
from __future__ import annotations

from minicb.request import Request
from minicb.scheduler.continuous import ContinuousScheduler, Step


def chunk_size(sched: ContinuousScheduler, req: Request, step: Step) -> int:
    """How many of req's uncomputed tokens run this step (0: none).

    Rules (each is checked by a test). Let todo = sched.uncomputed(req) (1 for a decode; the prompt,
    or the rest of it, for a prefill), budget = step.token_budget (what is left of the step's
    max_num_batched_tokens), c = sched.config:
    1. With c.enable_chunked_prefill: as many as fit, min(todo, budget), and at most
       c.long_prefill_token_threshold when that is not 0; never below 0.
    2. Without it, a request runs whole or not at all: todo if todo <= budget, else 0 ...
    3. ... except in a step that runs nothing yet (step.is_empty): then todo even past the budget, so
       that a request bigger than the budget (a preempted one that grew past it) cannot starve.
    """
    raise NotImplementedError("Lesson 07, task 1: chunk_size: how many of a request's tokens run this step. "
                              "Check it with: pytest tests/exercises -k lesson07_task1")


def slo_config() -> dict:
    """EngineConfig overrides that meet minicb.slo.SloTarget() on minicb.slo.slo_workload(). The
    knobs that matter: max_num_seqs, max_num_batched_tokens, enable_chunked_prefill,
    long_prefill_token_threshold, schedule_priority, max_waiting, max_queue_delay_s."""
    raise NotImplementedError("Lesson 07, task 2: slo_config: a configuration that meets the SLO. "
                              "Check it with: pytest tests/exercises -k lesson07_task2")
