"""Lesson 09: serving over HTTP, measured from the client's side. A benchmark client (minicb.serve.bench_client)
sends requests to an OpenAI-compatible server and stamps each streamed chunk as it arrives; your function
turns one request's stamps into its latencies.

Task 1  stream_metrics   pytest tests/exercises -k lesson09_task1

`minicb.serve.bench_client.run_benchmark(url, rate, n, metrics=mine.stream_metrics)` measures a server with yours.
"""
from __future__ import annotations

from minicb.serve.client_metrics import StreamMetrics


def stream_metrics(send_time: float, chunks: list[tuple[float, int]]) -> StreamMetrics:
    """One streamed request's latencies, in seconds, as the user who sent it saw them: what the benchmark
    client reports per request, and what a serving SLO is written in.

    It may read: send_time, when the client sent the request, and chunks, (arrival time, number of tokens
    it carries) for each chunk of the stream in arrival order, on send_time's clock. A chunk may carry
    no token (a role-only, usage-only or keep-alive chunk) or several (a server may coalesce tokens).

    The contract its StreamMetrics(ttft, itl, tpot, e2e, output_tokens) must meet (each part is checked):
    - output_tokens: how many tokens the stream delivered. A chunk without a token is not a token's
      arrival: it is never the first token, the last one, or a gap between two.
    - ttft: from the send to the arrival of the first token (the queue and the network are the user's wait).
    - e2e: from the send to the arrival of the last token.
    - itl: one entry per token after the first, in arrival order, none negative; the tokens one chunk
      delivers have equal entries, and the entries up to any chunk's last token add up to the time from
      the first token's arrival to that chunk's.
    - tpot: the mean time per token after the first; None when there is no token after the first.
    - a stream without a token (a rejected or failed request) is no error: ttft, tpot and e2e None, no ITLs,
      0 tokens.
    - a time before send_time, or before the previous chunk's, raises ValueError whose message tells the
      caller to stamp the send and every chunk with one monotonic clock (time.perf_counter()).
    """
    raise NotImplementedError("Lesson 09, task 1: stream_metrics: TTFT, ITL, TPOT and e2e from a stream's chunk "
                              "times. Check it with: pytest tests/exercises -k lesson09_task1")
