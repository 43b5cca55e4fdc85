"""Latency as a client sees it: TTFT, ITL, TPOT and end-to-end from one request's streamed chunks.

The engine's own numbers (minicb.metrics) start when a request reaches the engine; a user's clock
starts when they send it, so the client's TTFT also holds the network, the HTTP server and any queue
in front of the engine. Lesson 09 has you write stream_metrics (exercises/lesson09_serving.py); the
benchmark client (minicb.serve.bench_client) takes it as its `metrics=` argument.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StreamMetrics:
    """One request's latencies in seconds; None (and no ITLs) for a stream that carried no token."""
    ttft: float | None                 # send -> the first chunk carrying a token
    itl: list[float] = field(default_factory=list)   # one per output token after the first
    tpot: float | None = None          # (e2e - ttft) / (output_tokens - 1); None for a single token
    e2e: float | None = None           # send -> the last chunk carrying a token
    output_tokens: int = 0


def stream_metrics(send_time: float, chunks: list[tuple[float, int]]) -> StreamMetrics:
    """The latencies of one streamed request sent at `send_time`, from its chunks as (arrival time,
    number of tokens carried), in arrival order, on the same clock as send_time. See
    exercises/lesson09_serving.py for the rules."""
    times = [send_time, *(t for t, _ in chunks)]
    if any(later < earlier for earlier, later in zip(times, times[1:])):
        raise ValueError("chunk times must not go backwards or precede the send time: stamp the send and every "
                         "chunk with one monotonic clock (time.perf_counter()), in the order they arrive")
    tokens = [(t, k) for t, k in chunks if k > 0]   # role-only, usage-only and keep-alive chunks carry none
    if not tokens:
        return StreamMetrics(None)
    (first, first_k), last = tokens[0], tokens[-1][0]
    itl = [0.0] * (first_k - 1)   # tokens that came along with the first one arrived with no gap
    for (previous, _), (t, k) in zip(tokens, tokens[1:]):
        itl += [(t - previous) / k] * k   # a coalesced chunk's gap, shared by the k tokens it carries
    n = sum(k for _, k in tokens)
    ttft, e2e = first - send_time, last - send_time
    return StreamMetrics(ttft, itl, (e2e - ttft) / (n - 1) if n > 1 else None, e2e, n)
