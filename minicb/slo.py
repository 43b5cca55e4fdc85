"""Lesson 07's problem: keep a bursty workload within a latency SLO, graded on the simulator.

The workload mixes chat-like requests (a speaker line, a heavy-tailed reply) with a few long
documents whose prefill, unchunked, stalls every decode in its step. Arrivals are Poisson at a rate
the default configuration cannot keep up with. A configuration meets the SLO when the requests it
serves have p99 time-to-first-token and p99 inter-token latency within the targets, and it turns
away no more than a small fraction (admission control is allowed; making everyone slow is not).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from minicb.engine import LLMEngine
from minicb.metrics import summarize
from minicb.parts import EngineParts
from minicb.request import RequestOutput
from minicb.sampling import SamplingParams
from minicb.workload import WorkloadRequest, arrival_times, bard_prompts, output_lengths, run_workload


@dataclass(frozen=True)
class SloTarget:
    ttft_p99_s: float = 1.0
    itl_p99_s: float = 0.05
    max_rejected_fraction: float = 0.10


@dataclass(frozen=True)
class SloReport:
    served: int
    rejected: int
    ttft_p99_s: float
    itl_p99_s: float
    goodput_rps: float          # requests per second served within both targets
    met: bool

    def __str__(self) -> str:
        verdict = "meets" if self.met else "misses"
        return (f"{verdict} the SLO: served {self.served}, rejected {self.rejected}, p99 TTFT {self.ttft_p99_s:.3f} s, "
                f"p99 ITL {self.itl_p99_s * 1e3:.1f} ms, goodput {self.goodput_rps:.1f} req/s")


def slo_workload(n: int = 400, rate: float = 48.0, long_every: int = 10, seed: int = 0) -> list[WorkloadRequest]:
    """n requests at `rate` per second; every `long_every`-th is a 300-600 token document to summarise."""
    rng = random.Random(seed)
    prompts: list[str | list[int]] = list(bard_prompts(n, seed))
    for i in range(0, n, long_every):
        prompts[i] = [rng.randrange(3, 2000) for _ in range(rng.randint(300, 600))]
    lengths = output_lengths(n, "heavy", seed, max_len=256)
    times = arrival_times(n, rate, seed)
    return [WorkloadRequest(p, SamplingParams(temperature=0.0, max_tokens=k, ignore_eos=True), t)
            for p, k, t in zip(prompts, lengths, times)]


def goodput(outputs: list[RequestOutput], target: SloTarget) -> tuple[int, float]:
    """(requests served within the SLO, those per second): a request counts when its TTFT and its
    longest inter-token gap are within the p99 targets; the rate is over the span from the first
    arrival to the last result."""
    served = [o for o in outputs if o.outputs[0].finish_reason in ("stop", "length")]
    if not served:
        return 0, 0.0
    good = sum(o.metrics.ttft <= target.ttft_p99_s and max(o.metrics.itl, default=0.0) <= target.itl_p99_s
               for o in served)
    span = max(o.metrics.finished_time for o in served) - min(o.metrics.arrival_time for o in outputs)
    return good, good / span if span > 0 else math.nan


def meets(summary: dict, target: SloTarget) -> bool:
    """The verdict on a run's summary (minicb.metrics.summarize): p99 TTFT and p99 ITL within the
    targets, and no more than the allowed share turned away."""
    rejected = summary["requests"] - summary["served"]
    return (summary["ttft"]["p99"] <= target.ttft_p99_s and summary["itl"]["p99"] <= target.itl_p99_s
            and rejected <= target.max_rejected_fraction * summary["requests"])


def grade_slo(config: dict, target: SloTarget = SloTarget(), workload: list[WorkloadRequest] | None = None,
              num_blocks: int = 2048, parts: EngineParts | None = None) -> SloReport:
    """Run the workload on the simulator with these EngineConfig overrides and judge the result.
    parts: the engine's lesson parts (a lesson's course.parts()); None runs minicb's own, as the grader does."""
    engine = LLMEngine(device="cpu", simulate=True, num_blocks=num_blocks, parts=parts, **config)
    outputs = run_workload(engine, workload or slo_workload(), progress=False)
    summary = summarize(outputs, engine.trace)
    if summary["served"] == 0:   # everyone was turned away: no latency to measure, and the SLO is missed
        return SloReport(0, len(outputs), math.inf, math.inf, 0.0, False)
    _, rate = goodput(outputs, target)
    return SloReport(summary["served"], summary["requests"] - summary["served"], summary["ttft"]["p99"],
                     summary["itl"]["p99"], rate, meets(summary, target))
