"""The benchmark client (minicb.serve.bench_client): its aggregation on made-up records, its reading of a stream
on canned responses, and whole runs against a real `python -m minicb serve`."""
from __future__ import annotations

import argparse
import asyncio
import json
import socket

import httpx
import pytest

from minicb.cli import main
from minicb.serve import bench_client as bc
from minicb.serve.server_process import start_server
from minicb.serve.stream_metrics import stream_metrics
from minicb.stats.goodput import RequestSlo, SloTarget
from minicb.viz.loadcurve import plot_rate_sweep


def record(outcome: str = bc.COMPLETED, chunks: list[tuple[float, int]] | None = None, send: float = 0.0,
           end: float | None = None, status: int | None = 200, error: str | None = None) -> bc.RequestRecord:
    chunks = chunks if chunks is not None else []
    r = bc.RequestRecord("ROMEO.\n", 8, send, end if end is not None else max([send, *(t for t, _ in chunks)]),
                         outcome, status, chunks, sum(k for _, k in chunks) or None, error)
    r.metrics = stream_metrics(send, chunks)
    return r


# Three completed requests, one rejected, one failed, over 2 s.
RECORDS = [
    record(chunks=[(0.1, 1), (0.2, 1), (0.3, 1)]),               # TTFT 0.1, TPOT 0.1
    record(chunks=[(0.5, 1), (0.52, 1), (0.54, 2)], send=0.2),   # TTFT 0.3, TPOT 0.04 / 3, a coalesced chunk
    record(chunks=[(1.9, 1)], send=1.0),                         # TTFT 0.9, one token: no TPOT
    record(bc.REJECTED, status=503, error="HTTP 503: the queue is full", send=1.5, end=1.6),
    record(bc.FAILED, status=500, error="HTTP 500: boom", send=1.8, end=2.0),
]


def test_the_summary_counts_outcomes_and_pools_every_itl():
    s = bc.summarize_records(RECORDS, 2.0, SloTarget().per_request())
    assert (s["requests"], s["completed"], s["rejected"], s["failed"]) == (5, 3, 1, 1)
    assert s["output_tokens"] == 8 and s["output_throughput"] == 4.0 and s["request_throughput"] == 1.5
    assert s["ttft"]["p50"] == pytest.approx(0.3) and s["ttft"]["mean"] == pytest.approx(1.3 / 3)
    assert s["itl"]["mean"] == pytest.approx((0.1 + 0.1 + 0.02 + 0.01 + 0.01) / 5), "every ITL of every request, pooled"
    assert s["tpot"]["mean"] == pytest.approx((0.1 + 0.04 / 3) / 2), "a one-token request has no TPOT to average"
    assert s["e2e"]["p99"] == pytest.approx(0.34 + 0.98 * (0.9 - 0.34))


# A stream that stalls once: TTFT 0.1, gaps 0.01, 0.2 and 0.01, so its TPOT (0.22 / 3) hides the 0.2 s stall.
STALLED = record(chunks=[(0.1, 1), (0.11, 1), (0.31, 1), (0.32, 1)])


@pytest.mark.parametrize("slo,good", [
    # By hand, for the completed requests (TTFT; longest gap; TPOT; e2e): the first (0.1; 0.1; 0.1; 0.3), the
    # second (0.3; 0.02; 0.0133; 0.34), the one-token third (0.9; none; none; 0.9), STALLED (0.1; 0.2; 0.0733; 0.32).
    (RequestSlo(ttft_s=1.0, itl_s=0.05), 2),    # the second and the third: a one-token reply has no gap to miss
    (RequestSlo(ttft_s=1.0, tpot_s=0.08), 3),   # the stall passes on the mean gap: the same runs, one more good
    (RequestSlo(ttft_s=1.0, itl_s=0.15), 3),    # only STALLED's 0.2 s gap misses
    (RequestSlo(e2e_s=0.5), 3),                 # the third ends 0.9 s after its send
    (RequestSlo(ttft_s=0.2), 2),                # the first and STALLED
    (RequestSlo(ttft_s=0.2, e2e_s=0.31), 1),    # every target: STALLED meets the TTFT but ends at 0.32 s
    (RequestSlo(ttft_s=0.05), 0),
])
def test_goodput_counts_completed_requests_that_meet_every_target_set(slo, good):
    s = bc.summarize_records([*RECORDS, STALLED], 2.0, slo)
    assert s["good"] == good and s["goodput"] == good / 2.0
    assert s["slo"] == {"ttft_s": slo.ttft_s, "itl_s": slo.itl_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s}


def test_each_slo_flag_sets_the_target_it_names_and_the_summary_names_them():
    parser = argparse.ArgumentParser()
    bc.add_arguments(parser)
    default = parser.parse_args([])
    assert (default.slo_ttft, default.slo_itl, default.slo_tpot, default.slo_e2e) == (1.0, 0.05, None, None)
    as_vllm = parser.parse_args(["--slo-itl", "none", "--slo-tpot", "0.08"])
    assert (as_vllm.slo_ttft, as_vllm.slo_itl, as_vllm.slo_tpot) == (1.0, None, 0.08)
    with pytest.raises(SystemExit):
        parser.parse_args(["--slo-itl", "-1"])
    slo = RequestSlo(ttft_s=as_vllm.slo_ttft, tpot_s=as_vllm.slo_tpot)
    result = bc.BenchResult({"num_prompts": 4, "workload": "bard", "max_tokens": 8, "rate": 2.0, "model": "bard",
                             "base_url": "http://x"}, 2.0, bc.summarize_records([*RECORDS, STALLED], 2.0, slo),
                            [*RECORDS, STALLED])
    assert "goodput 1.50 req/s (3 with TTFT <= 1 s and TPOT <= 80 ms)" in bc.format_summary(result)


def test_a_run_where_nothing_completes_has_no_latencies_and_saves_as_standard_json(tmp_path):
    records = [record(bc.REJECTED, status=429, error="HTTP 429", end=0.01)]
    s = bc.summarize_records(records, 0.01, SloTarget().per_request())
    assert s["completed"] == 0 and s["goodput"] == 0.0 and s["ttft"] == dict.fromkeys(("mean", "p50", "p90", "p99"))
    config = {"base_url": "http://x", "model": "bard", "rate": None, "num_prompts": 1, "workload": "bard",
              "max_tokens": 8}
    result = bc.BenchResult(config, 0.01, s, records)
    bc.save_results([result], tmp_path / "r.json")   # allow_nan=False: a NaN would raise here
    assert bc.load_results(tmp_path / "r.json") == [result]
    table = bc.format_summary(result)
    assert "all at once" in table and "TTFT          -        -        -        -" in table, table


def test_results_round_trip_through_json(tmp_path):
    result = bc.BenchResult({"base_url": "http://x", "rate": 2.5}, 2.0, bc.summarize_records(RECORDS, 2.0, SloTarget().per_request()),
                            RECORDS)
    bc.save_results([result, result], tmp_path / "sweep.json")
    assert bc.load_results(tmp_path / "sweep.json") == [result, result]
    assert isinstance(bc.load_results(tmp_path / "sweep.json")[0].requests[0].chunks[0], tuple)


# --- reading a stream: canned responses through httpx's MockTransport ------------------------------------

def sse(*events: dict | str) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


def choice(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def send(respond) -> bc.RequestRecord:
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(respond), base_url="http://test") as client:
            return await bc.send_request(client, {"prompt": "ROMEO.\n", "max_tokens": 8}, 0.0)
    return asyncio.run(go())


def test_a_stream_is_read_chunk_by_chunk_and_its_usage_has_the_last_word():
    body = (b": keep-alive\n\n" + sse(choice("But"), choice(""), choice(" soft")) + b": keep-alive\n\n"
            + sse(choice("", "stop"), {"choices": [], "usage": {"completion_tokens": 3}}, "[DONE]"))
    r = send(lambda request: httpx.Response(200, content=body))
    assert r.outcome == bc.COMPLETED and r.error is None and r.usage_tokens == 3
    assert [k for _, k in r.chunks] == [1, 0, 1, 1, 0], (
        "a chunk with text is a token; the EOS token, which has no text, goes to the last chunk with a choice")
    assert sum(k for _, k in r.chunks) == r.usage_tokens
    assert r.send_time <= r.chunks[0][0] <= r.chunks[-1][0] <= r.end_time


def test_a_429_or_503_is_a_rejection_and_anything_else_a_failure():
    r = send(lambda request: httpx.Response(503, headers={"Retry-After": "2"},
                                            json={"error": {"message": "the queue is full (max_waiting=0)"}}))
    assert (r.outcome, r.status, r.retry_after_s) == (bc.REJECTED, 503, 2.0)
    assert r.error == "HTTP 503: the queue is full (max_waiting=0)" and r.chunks == []
    r = send(lambda request: httpx.Response(500, text="Internal Server Error"))
    assert (r.outcome, r.error) == (bc.FAILED, "HTTP 500: Internal Server Error")
    r = send(lambda request: httpx.Response(200, content=sse(choice("x"), {"error": {"message": "shutting down",
                                                                                      "code": 500}})))
    assert (r.outcome, r.error) == (bc.FAILED, "in the stream: shutting down")
    r = send(lambda request: httpx.Response(200, content=sse("[DONE]")))
    assert (r.outcome, r.error) == (bc.FAILED, "the stream ended without a token")


def test_a_connection_error_is_a_failure_not_a_crash():
    def refuse(request):
        raise httpx.ConnectError("connection refused")
    r = send(refuse)
    assert (r.outcome, r.status, r.error) == (bc.FAILED, None, "ConnectError: connection refused")


# --- the sweep's figure --------------------------------------------------------------------------------

def test_the_sweep_plot_draws_latency_and_throughput_against_the_rate(tmp_path):
    summary = bc.summarize_records(RECORDS, 2.0, SloTarget().per_request())
    results = [bc.BenchResult({"rate": rate}, 2.0, summary, RECORDS) for rate in (4.0, 1.0, 2.0)]
    fig = plot_rate_sweep(results)
    assert [ax.get_title() for ax in fig.axes] == ["time to first token", "inter-token latency", "throughput"]
    assert list(fig.axes[0].lines[0].get_xdata()) == [1.0, 2.0, 4.0]
    fig.savefig(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="sweep finite rates"):
        plot_rate_sweep([*results, bc.BenchResult({"rate": None}, 2.0, summary, RECORDS)])


# --- whole runs against a real `python -m minicb serve` -------------------------------------------------

@pytest.fixture(scope="module")
def bard_server():
    with start_server() as server:
        yield server


def server_counts(server) -> tuple[float, float]:
    """The server's own count of tokens generated and of requests it turned away, so far."""
    return (server.metric("minicb:generation_tokens_total"),
            server.metric("minicb:request_success_total", finished_reason="rejected"))


def test_every_request_is_answered_and_counted_as_the_server_counts(bard_server, tmp_path):
    tokens_before, _ = server_counts(bard_server)
    result = bc.run_benchmark(bard_server.url, 200, 12, max_tokens=8, progress=False)
    s = result.summary
    assert (s["completed"], s["rejected"], s["failed"]) == (12, 0, 0), bc.format_summary(result)
    assert result.config["model"] == "bard", "the model is the server's first in GET /v1/models"
    for r in result.requests:
        assert r.status == 200 and 1 <= r.usage_tokens <= 8
        assert r.metrics.output_tokens == r.usage_tokens, "the client's token count is the server's usage"
        assert 0 < r.metrics.ttft <= r.metrics.e2e <= r.end_time - r.send_time
    assert s["output_tokens"] == server_counts(bard_server)[0] - tokens_before, "the server generated as many"
    bc.save_results([result], tmp_path / "run.json")
    assert bc.load_results(tmp_path / "run.json") == [result]


def test_a_notebook_runs_it_inside_its_event_loop_with_its_own_metrics(bard_server):
    seen = []

    def mine(send_time, chunks):
        seen.append(len(chunks))
        return stream_metrics(send_time, chunks)

    async def cell():   # Jupyter runs a cell's code while its event loop runs
        return bc.run_benchmark(bard_server.url, None, 3, max_tokens=4, metrics=mine, progress=False)

    result = asyncio.run(cell())
    assert result.summary["completed"] == 3 and len(seen) == 3, "metrics= computes every request's latencies"


def test_the_cli_sweeps_rates_and_writes_the_results_and_the_curve(bard_server, tmp_path, capsys):
    out, png = tmp_path / "sweep.json", tmp_path / "curve.png"
    assert main(["bench", "serve", "--base-url", bard_server.url + "/v1", "--sweep", "100,400", "--num-prompts", "6",
                 "--workload", "fixed", "--max-tokens", "4", "--ignore-eos", "--output", str(out),
                 "--plot", str(png)]) == 0
    results = bc.load_results(out)
    assert [r.config["rate"] for r in results] == [100.0, 400.0]
    assert all(r.usage_tokens == 4 for res in results for r in res.requests), "fixed + ignore_eos: every reply 4 tokens"
    assert png.read_bytes()[:4] == b"\x89PNG"
    table = capsys.readouterr().out
    assert "completed 6, rejected 0, failed 0" in table and "TTFT p99" in table, table


def test_requests_turned_away_count_as_rejected_not_failed():
    # One seat and one place in the queue: of 12 sent at once, the first are served and most are turned away.
    with start_server("--max-num-seqs", "1", "--max-waiting", "1") as server:
        result = bc.run_benchmark(server.url, None, 12, max_tokens=8, progress=False)
        s = result.summary
        assert s["completed"] >= 1 and s["rejected"] >= 1 and s["failed"] == 0, bc.format_summary(result)
        assert s["completed"] + s["rejected"] == 12
        assert s["rejected"] == server_counts(server)[1], "the server turned away as many as the client counts"
    for r in result.requests:
        if r.outcome == bc.REJECTED:
            assert r.status == 503 and r.retry_after_s is not None and "max_waiting" in r.error
            assert r.metrics.ttft is None and r.chunks == []
    assert s["goodput"] <= s["request_throughput"]


def test_an_unreachable_server_is_an_error_that_says_what_to_do(capsys):
    with socket.socket() as sock:   # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert main(["bench", "serve", "--base-url", url, "--num-prompts", "1"]) == 2
    assert "is the server running (python -m minicb serve)?" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--rate", "4"], ["--sweep", "2,inf"]], ids=["no sweep", "an infinite rate"])
def test_a_plot_needs_a_sweep_of_finite_rates_and_is_refused_before_any_run(flags, capsys):
    assert main(["bench", "serve", "--base-url", "http://127.0.0.1:9", *flags, "--plot", "curve.png"]) == 2
    assert "give finite rates with --sweep" in capsys.readouterr().err
