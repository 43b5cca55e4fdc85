"""Latency and throughput from a run: per request (TTFT, TPOT, ITL, end-to-end, queue) and in aggregate."""
from __future__ import annotations

from minicb.scheduler.request import RequestOutput
from minicb.stats.trace import Trace


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; nan for no values."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def latency_summary(values: list[float]) -> dict[str, float]:
    return {"mean": sum(values) / len(values) if values else float("nan"),
            "p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99)}


def summarize(outputs: list[RequestOutput], trace: Trace) -> dict:
    """What a serving benchmark reports; times are on the engine's clock (wall or simulated)."""
    served = [o for o in outputs if o.outputs[0].finish_reason in ("stop", "length")]
    m = [o.metrics for o in served]
    tokens = sum(len(o.outputs[0].token_ids) for o in served)
    start = min((x.arrival_time for x in m), default=0.0)
    end = max((x.finished_time for x in m), default=0.0)
    span = end - start
    prompt_tokens = sum(len(o.prompt_token_ids) for o in served)
    return {
        "requests": len(outputs),
        "served": len(served),
        "output_tokens": tokens,
        "duration_s": span,
        "output_tok_per_s": tokens / span if span > 0 else float("nan"),
        "requests_per_s": len(served) / span if span > 0 else float("nan"),
        "steps": trace.num_steps,   # every step run, dropped ones included
        "seat_utilization": trace.seat_utilization,
        "seat_utilization_while_queued": trace.seat_utilization_while_queued,
        "queued_step_share": trace.queued_step_share,
        "padding_waste": trace.padding_waste,
        # Share of prompt tokens taken from the prefix cache, not prefilled.
        "prefix_cache_hit_rate": (sum(o.num_cached_tokens for o in served) / prompt_tokens if prompt_tokens
                                  else 0.0),
        "ttft": latency_summary([x.ttft for x in m]),
        "tpot": latency_summary([x.tpot for x in m if x.tpot is not None]),
        "itl": latency_summary([gap for x in m for gap in x.itl]),
        "e2e": latency_summary([x.e2e_latency for x in m]),
        "queue": latency_summary([x.queue_time for x in m]),
    }
