"""stream_metrics: one streamed request's latencies from its chunks' arrival times (lesson 09's reference).
What each latency means is in minicb/serve/client_metrics.py and exercises/lesson09_serving.py.
"""
from __future__ import annotations

from minicb.serve.client_metrics import StreamMetrics


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
