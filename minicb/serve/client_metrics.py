"""Latency as a client sees it: TTFT, ITL, TPOT and end-to-end from one request's streamed chunks.

The engine's own numbers (minicb.stats.metrics) start when a request reaches the engine; a user's clock
starts when they send it, so the client's TTFT also holds the network, the HTTP server and any queue
in front of the engine. Lesson 09 has you write stream_metrics (exercises/lesson09_serving.py; minicb's
own is in minicb/serve/stream_metrics.py); the benchmark client (minicb.serve.bench_client) takes it as its
`metrics=` argument.
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
