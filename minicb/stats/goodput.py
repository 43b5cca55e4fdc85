"""Latency targets (SLOs) and goodput: what a served request must meet to count, and the verdict on a run.

Goodput is DistServe's (Zhong et al., OSDI 2024): completed requests per second that meet every target of
a RequestSlo. Name the targets with the figure; docs/GLOSSARY.md tables the course's three sets of them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from minicb.scheduler.request import RequestOutput


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:g} ms" if seconds < 1 else f"{seconds:g} s"


@dataclass(frozen=True)
class RequestSlo:
    """One request's latency targets for goodput, in seconds; None leaves a target out."""
    ttft_s: float | None = None     # arrival (for a client: the send) to first token
    itl_s: float | None = None      # every gap between consecutive tokens
    tpot_s: float | None = None     # mean gap: (last token - first token) / (tokens - 1)
    e2e_s: float | None = None      # arrival to the whole result

    def __post_init__(self) -> None:
        targets = dataclasses.asdict(self)
        if all(v is None for v in targets.values()):
            raise ValueError("a goodput SLO needs at least one target (ttft_s, itl_s, tpot_s or e2e_s); "
                             "without one, goodput is the request throughput")
        for name, value in targets.items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds or None, not {value}")

    def met(self, ttft: float | None, itl: list[float], tpot: float | None, e2e: float | None) -> bool:
        """True if every target set is met. A None value (a one-token reply's TPOT) or no gaps cannot miss."""
        longest_gap = max(itl, default=None)
        return all(target is None or value is None or value <= target
                   for target, value in ((self.ttft_s, ttft), (self.itl_s, longest_gap), (self.tpot_s, tpot),
                                         (self.e2e_s, e2e)))

    def describe(self) -> str:
        """The targets in words, e.g. 'TTFT <= 1 s and every inter-token gap <= 50 ms'."""
        words = (("TTFT", self.ttft_s), ("every inter-token gap", self.itl_s), ("TPOT", self.tpot_s),
                 ("e2e", self.e2e_s))
        return " and ".join(f"{name} <= {_duration(value)}" for name, value in words if value is not None)


@dataclass(frozen=True)
class SloTarget:
    ttft_p99_s: float = 1.0
    itl_p99_s: float = 0.05
    max_rejected_fraction: float = 0.10

    def per_request(self) -> RequestSlo:
        """The same targets for one request: its TTFT and every one of its gaps."""
        return RequestSlo(ttft_s=self.ttft_p99_s, itl_s=self.itl_p99_s)


def goodput(outputs: list[RequestOutput], slo: RequestSlo | SloTarget) -> tuple[int, float]:
    """(served requests meeting every target, those per second from the first arrival to the last result).
    An SloTarget counts as its per_request()."""
    slo = slo.per_request() if isinstance(slo, SloTarget) else slo
    served = [o for o in outputs if o.outputs[0].finish_reason in ("stop", "length")]
    if not served:
        return 0, 0.0
    good = sum(slo.met(o.metrics.ttft, o.metrics.itl, o.metrics.tpot, o.metrics.e2e_latency) for o in served)
    span = max(o.metrics.finished_time for o in served) - min(o.metrics.arrival_time for o in outputs)
    return good, good / span if span > 0 else math.nan


def meets(summary: dict, target: SloTarget) -> bool:
    """Whether a summarize() result has p99 TTFT and ITL within target and no more than the allowed share
    turned away."""
    rejected = summary["requests"] - summary["served"]
    return (summary["ttft"]["p99"] <= target.ttft_p99_s and summary["itl"]["p99"] <= target.itl_p99_s
            and rejected <= target.max_rejected_fraction * summary["requests"])
