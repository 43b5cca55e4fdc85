"""Lesson 08's capstone: the highest arrival rate at which a configuration keeps an SLO, graded on the simulator.

The problem: lesson 07's workload (chat requests, every `long_every`-th a long document) at any Poisson
rate, drawn from a seed, and a stricter SLO, served by the engine the course built: your lessons' parts
(course.parts(), minicb's in place of each one still a stub). The answer: EngineConfig overrides (the server's knobs,
not the hardware's) and an arrival rate. grade() runs the answer on the simulator, with the default
"this CPU" step cost, on workloads of seeds the learner never sees (the tests hold them): the rate must
keep the SLO on all of them, and be at least RATE_SHARE of the reference answer's rate.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Real

from minicb import course
from minicb.config import EngineConfig
from minicb.course.slo import SloReport, grade_slo, slo_workload
from minicb.lab.workload import WorkloadRequest
from minicb.parts import EngineParts
from minicb.stats.goodput import SloTarget

RATE_SHARE = 0.9   # of the reference's rate: a pass needs the SLO kept at a rate at least this high

# The knobs a server operator sets. The rest of EngineConfig is the problem's (the model, the hardware: step
# cost, KV pool) or changes no result (tracing, checks), so an answer may not touch it.
TUNABLE = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "long_prefill_token_threshold",
           "schedule_priority", "scheduling_policy", "max_waiting", "max_queue_delay_s", "preemption_mode",
           "swap_space_mb", "batching")

# Stricter than lesson 07's: a first token within half a second, and at most one request in twenty turned away.
TARGET = SloTarget(ttft_p99_s=0.5, itl_p99_s=0.05, max_rejected_fraction=0.05)


@dataclass(frozen=True)
class CapstoneProblem:
    """n requests per run; every `long_every`-th a 300-600 token document. The KV pool holds
    num_blocks blocks. practice_seeds: the seeds to tune and search on (grading uses others)."""
    n: int = 240
    long_every: int = 8
    target: SloTarget = TARGET
    num_blocks: int = 2048
    practice_seeds: tuple[int, ...] = (0, 1, 2)

    def workload(self, rate: float, seed: int) -> list[WorkloadRequest]:
        """The requests of one run: arrivals at `rate` per second; seed draws prompts, lengths and gaps."""
        return slo_workload(self.n, rate, self.long_every, seed)


def meets_slo(config: dict, rate: float, seeds: Iterable[int], problem: CapstoneProblem = CapstoneProblem(),
              parts: EngineParts | None = None) -> tuple[bool, dict[int, SloReport]]:
    """Whether `config` keeps problem.target at `rate` on every seed's workload, and each run's report by
    seed. The runs stop at the first seed that misses: all must meet it, so the rest cannot change the answer.
    parts: the engine's lesson parts; None: course.parts(), yours, as for grade_slo."""
    parts = course.parts() if parts is None else parts
    reports: dict[int, SloReport] = {}
    for seed in seeds:
        reports[seed] = grade_slo(config, problem.target, problem.workload(rate, seed), problem.num_blocks, parts)
        if not reports[seed].met:
            return False, reports
    return True, reports


def _above(value: float, bound: float, decimals: int) -> str:
    """value, above bound, with at least `decimals` decimals and as many more as it takes to read above it:
    a miss by 0.04 ms must not print as 50.0 ms > 50 ms."""
    while round(value, decimals) <= bound and decimals < 9:
        decimals += 1
    return f"{value:.{decimals}f}"


def missed(report: SloReport, target: SloTarget) -> str:
    """The parts of the target a run missed, in words."""
    total = report.served + report.rejected
    parts = []
    if report.ttft_p99_s > target.ttft_p99_s:
        parts.append(f"p99 TTFT {_above(report.ttft_p99_s, target.ttft_p99_s, 3)} s > {target.ttft_p99_s} s")
    if report.itl_p99_s > target.itl_p99_s:
        parts.append(f"p99 ITL {_above(report.itl_p99_s * 1e3, target.itl_p99_s * 1e3, 1)} ms > "
                     f"{target.itl_p99_s * 1e3:.0f} ms")
    if report.rejected > target.max_rejected_fraction * total:
        parts.append(f"{report.rejected} of {total} requests turned away ({report.rejected / total:.0%}) > "
                     f"{target.max_rejected_fraction:.0%}")
    return ", ".join(parts)


def answer_error(answer: object) -> str | None:
    """What makes `answer` no (config, rate) pair the grader can run, in words; None when it is one."""
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return f"return a pair (config, rate), not {answer!r}"
    config, rate = answer
    if not isinstance(config, dict):
        return f"the configuration must be a dict of EngineConfig overrides, not {type(config).__name__}"
    foreign = sorted(set(config) - set(TUNABLE))
    if foreign:
        return (f"the configuration sets {', '.join(foreign)}: the problem fixes those (model, hardware, "
                f"simulator); tune only {', '.join(TUNABLE)}")
    try:
        EngineConfig(**config)
    except (TypeError, ValueError) as error:
        return f"the configuration is not a valid EngineConfig: {error}"
    if isinstance(rate, bool) or not isinstance(rate, Real) or not (math.isfinite(rate) and rate > 0):
        return f"the rate must be a finite number of requests per second > 0, not {rate!r}"
    return None


@dataclass(frozen=True)
class CapstoneGrade:
    """An answer's verdict: the first rule it breaks, in words, or None for each rule it keeps."""
    answer_error: str | None               # not a (config, rate) pair the grader can run
    slo_failure: str | None = None         # the SLO missed at the answer's rate on a grading seed
    rate_failure: str | None = None        # the rate under RATE_SHARE of the reference's
    reports: dict[int, SloReport] = field(default_factory=dict)   # by grading seed, up to the first miss

    @property
    def passed(self) -> bool:
        return self.answer_error is None and self.slo_failure is None and self.rate_failure is None

    def __str__(self) -> str:
        broken = [e for e in (self.answer_error, self.slo_failure, self.rate_failure) if e]
        return "passed" if self.passed else "failed: " + "; ".join(broken)


def grade(answer: object, reference_rate: float | None, seeds: tuple[int, ...],
          problem: CapstoneProblem = CapstoneProblem()) -> CapstoneGrade:
    """Judge a capstone answer (config, rate) on the workloads of `seeds`, held out from the learner, against
    the reference's rate (None: the rate is not judged), on your lessons' parts (meets_slo's default). A failure
    names a workload by its place among them, not by its seed."""
    error = answer_error(answer)
    if error:
        return CapstoneGrade(error)
    config, rate = answer
    met, reports = meets_slo(config, rate, seeds, problem)
    slo_failure = None
    if not met:
        report = list(reports.values())[-1]
        slo_failure = (f"at your rate {rate:.1f} req/s the SLO fails on held-out workload {len(reports)} of "
                       f"{len(seeds)}: {missed(report, problem.target)}")
    rate_failure = None if reference_rate is None else short_of_the_reference(rate, reference_rate)
    return CapstoneGrade(None, slo_failure, rate_failure, reports)


def short_of_the_reference(rate: float, reference_rate: float) -> str | None:
    """What is wrong with a rate under RATE_SHARE of the reference's, in words; None when it is not."""
    if rate >= RATE_SHARE * reference_rate:
        return None
    return (f"your rate {rate:.1f} req/s is {rate / reference_rate:.0%} of the reference's {reference_rate:.1f} "
            f"req/s: at least {RATE_SHARE:.0%} is needed")
