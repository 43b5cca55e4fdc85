"""Lesson 09: serving over HTTP, measured from the client's side. A benchmark client (minicb.bench_client)
sends requests to an OpenAI-compatible server and stamps each streamed chunk as it arrives; your function
turns one request's stamps into its latencies.

Task 1  stream_metrics   pytest tests/exercises -k lesson09_task1

`minicb.bench_client.run_benchmark(url, rate, n, metrics=mine.stream_metrics)` measures a server with yours.
"""
from __future__ import annotations

from minicb.client_metrics import StreamMetrics


def stream_metrics(send_time: float, chunks: list[tuple[float, int]]) -> StreamMetrics:
    """One streamed request's latencies, in seconds: StreamMetrics(ttft, itl, tpot, e2e, output_tokens).
    send_time: when the client sent the request; chunks: (arrival time, tokens it carries) for each chunk
    of its stream, in arrival order, on the same clock.

    Rules (each is checked by a test):
    1. Only chunks carrying at least one token count: a chunk with 0 tokens (a role-only, usage-only or
       keep-alive chunk) is neither a first token, nor a gap, nor an end. output_tokens = their sum.
    2. ttft = the first token-carrying chunk's time - send_time (the queue and the network included).
    3. e2e = the last token-carrying chunk's time - send_time.
    4. itl: one per output token after the first. A token-carrying chunk arriving `gap` after the
       previous token-carrying chunk and carrying k tokens (a server may coalesce tokens into one
       chunk) adds k ITLs of gap / k; the first token-carrying chunk's k - 1 other tokens arrived along
       with the first token: k - 1 ITLs of 0. So sum(itl) = e2e - ttft, and len(itl) = output_tokens - 1.
    5. tpot = (e2e - ttft) / (output_tokens - 1); None when output_tokens is 1.
    6. A stream with no token at all (a rejected or failed request): StreamMetrics(ttft=None, itl=[],
       tpot=None, e2e=None, output_tokens=0), never an error.
    7. A chunk time before send_time or before the previous chunk's time raises ValueError, whose
       message says to stamp the send and every chunk with one monotonic clock (time.perf_counter()).
    """
    raise NotImplementedError("Lesson 09, task 1: stream_metrics: TTFT, ITL, TPOT and e2e from a stream's chunk "
                              "times. Check it with: pytest tests/exercises -k lesson09_task1")
