"""Lesson 08: the capstone. minicb.course.capstone holds the problem: a workload generator (lesson 07's chat
requests and long documents, at any Poisson rate, from a seed), an SLO, and the seeds to practise on.
Your answer is a server configuration and the highest arrival rate at which it keeps the SLO.

Task 1  capstone   pytest tests/exercises -k lesson08_task1

The grader, minicb.course.capstone.grade, runs your answer on the simulator (the default "this CPU" step
cost) with workloads drawn from seeds you have not seen, on the engine your lessons built: meets_slo
runs your parts (course.parts(): minicb's in place of each one still a stub, saying so).
"""
from __future__ import annotations

from minicb.course.capstone import CapstoneProblem, meets_slo  # noqa: F401  (meets_slo: the check to search with)


def capstone(problem: CapstoneProblem) -> tuple[dict, float]:
    """Return (config, rate): EngineConfig overrides, and the highest arrival rate (requests per
    second) at which they keep problem.target on problem.workload(rate, seed).

    Rules (each is checked by a test):
    1. config is a dict of valid EngineConfig overrides that sets only the server's knobs, those in
       minicb.course.capstone.TUNABLE (seats, token budget, chunked prefill, queue limits, ...): the model,
       the hardware (step cost, KV pool) and the simulator are the problem's. rate is a finite number > 0.
    2. At your rate, your config keeps the SLO on the workloads of ten seeds you have not seen, drawn as
       problem.workload draws the practice ones (problem.practice_seeds: tune on those).
    3. Your rate is at least 90% of the reference answer's rate (its own configuration, which keeps the
       SLO on the unseen seeds at its rate).

    What you may use: meets_slo(config, rate, seeds, problem) says whether a configuration keeps the SLO at a
    rate on those seeds' workloads, with each run's report. It runs your lessons' parts, as the grader does;
    lesson 07's task 2 was graded on minicb's (EngineParts()), so a search that passes those measures another
    engine. A step costs about 2 ms + 0.22 ms per token it runs (lesson 07's fit). Every seed's workload has
    its own highest rate.
    Runs get slow at low rates (the same requests over a longer simulated time): search upwards of a
    few requests per second.
    """
    raise NotImplementedError("Lesson 08, task 1: capstone: a configuration and the highest rate at which it "
                              "meets the SLO. Check it with: pytest tests/exercises -k lesson08_task1")
