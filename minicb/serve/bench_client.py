"""`python -m minicb bench serve`: load a running OpenAI-compatible server (minicb's, or vLLM's) and measure it
from the client's side, as a user would feel it.

Requests arrive as a Poisson process (seeded exponential gaps, `rate` per second; rate None or inf: all at
once), each from its own async client task streaming `POST /v1/completions` with `stream_options:
{include_usage: true}`. Prompts and max_tokens come from minicb.lab.workload: Bard's speaker lines, with max_tokens
the same for all ("fixed"), heavy-tailed ("heavy", the corpus's lengths), or the cap for everyone ("bard",
the model stops at its own EOS). Only OpenAI fields are sent, unless ignore_eos asks for vLLM's (and
minicb's) ignore_eos, which forces the lengths.

What is measured, per request (minicb.serve.stream_metrics.stream_metrics, or the `metrics=` you pass):
- Tokens per chunk: the OpenAI stream does not say, so a chunk whose choice carries text counts as one
  token (a server sends one chunk per engine step), and a chunk without text (keep-alive, usage-only) as
  none. The final usage is the server's count: tokens it reports beyond those (an EOS token has no text;
  text the detokenizer held back comes out late) go to the last chunk with a choice, so every request's
  token total is the server's.
- TTFT from the send (the client's queue, the network and the server's queue included) to the first token;
  ITL, one per token after the first, a chunk's gap shared by the tokens it carries; TPOT = (e2e - TTFT) /
  (tokens - 1); e2e from the send to the last token.
And over the run: the mean, p50, p90 and p99 of each (every ITL of every completed request in one pool);
requests and output tokens per second over the run's duration (from the first send to the last response);
the rejected (HTTP 429 or 503, Retry-After noted) and failed (any other error) requests; and goodput,
DistServe's: completed requests per second that meet every target of a minicb.stats.goodput.RequestSlo. By default
its targets are lesson 07's SloTarget, per request: TTFT <= 1 s and every inter-token gap <= 50 ms
(--slo-ttft, --slo-itl), the definition minicb.stats.goodput.goodput uses. --slo-tpot adds a target on the mean
gap (TPOT), which is what vLLM's benchmark (`--goodput tpot:MS`) judges, and --slo-e2e one on the whole
reply; `none` drops a target. A one-token reply has no gap and no TPOT, so it cannot miss those.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from tqdm.auto import tqdm

from minicb.lab.workload import make_workload
from minicb.serve.client_metrics import StreamMetrics
from minicb.serve.stream_metrics import stream_metrics
from minicb.stats.goodput import RequestSlo, SloTarget
from minicb.stats.metrics import latency_summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WORKLOADS = {"bard": "natural", "fixed": "fixed", "heavy": "heavy"}   # --workload -> make_workload's lengths
REJECTED_STATUSES = (429, 503)   # the server turned the request away (admission control), not an error
COMPLETED, REJECTED, FAILED = "completed", "rejected", "failed"
Metrics = Callable[[float, list[tuple[float, int]]], StreamMetrics]


@dataclass
class RequestRecord:
    """One request as the client saw it; times in seconds since the run started."""
    prompt: str
    max_tokens: int
    send_time: float
    end_time: float                          # when the response ended (or the error came)
    outcome: str                             # COMPLETED, REJECTED or FAILED
    status: int | None                       # HTTP status; None when no response came
    chunks: list[tuple[float, int]]          # (arrival time, tokens carried) of every data chunk
    usage_tokens: int | None = None          # the server's completion_tokens (include_usage)
    error: str | None = None
    retry_after_s: float | None = None       # a rejection's Retry-After header
    metrics: StreamMetrics | None = None     # benchmark()'s `metrics=` of send_time and chunks

    @classmethod
    def from_dict(cls, d: dict) -> RequestRecord:
        metrics = d["metrics"] and StreamMetrics(**d["metrics"])
        return cls(**{**d, "chunks": [tuple(c) for c in d["chunks"]], "metrics": metrics})


@dataclass
class BenchResult:
    config: dict          # what was run: base_url, model, rate (None: all at once), num_prompts, workload, ...
    duration_s: float
    summary: dict         # summarize_records' numbers
    requests: list[RequestRecord]

    @classmethod
    def from_dict(cls, d: dict) -> BenchResult:
        return cls(**{**d, "requests": [RequestRecord.from_dict(r) for r in d["requests"]]})


def save_results(results: list[BenchResult], path: str | Path) -> None:
    """One JSON list (one result per rate), standard JSON: a missing number is null, never NaN."""
    Path(path).write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1, allow_nan=False))


def load_results(path: str | Path) -> list[BenchResult]:
    return [BenchResult.from_dict(d) for d in json.loads(Path(path).read_text())]


def _finite(summary: dict[str, float]) -> dict[str, float | None]:
    return {k: None if math.isnan(v) else v for k, v in summary.items()}


def summarize_records(records: list[RequestRecord], duration_s: float, slo: RequestSlo) -> dict:
    """The run's numbers from its records (see the module's docstring for each definition)."""
    done = [r.metrics for r in records if r.outcome == COMPLETED]
    good = sum(slo.met(m.ttft, m.itl, m.tpot, m.e2e) for m in done)
    tokens = sum(m.output_tokens for m in done)
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: None)
    return {
        "requests": len(records), "completed": len(done),
        "rejected": sum(r.outcome == REJECTED for r in records), "failed": sum(r.outcome == FAILED for r in records),
        "duration_s": duration_s, "output_tokens": tokens,
        "request_throughput": per_s(len(done)), "output_throughput": per_s(tokens),
        "good": good, "goodput": per_s(good), "slo": dataclasses.asdict(slo),
        "ttft": _finite(latency_summary([m.ttft for m in done])),
        "itl": _finite(latency_summary([gap for m in done for gap in m.itl])),
        "tpot": _finite(latency_summary([m.tpot for m in done if m.tpot is not None])),
        "e2e": _finite(latency_summary([m.e2e for m in done])),
    }


def _api_root(base_url: str) -> str:
    """The server's root: a base URL given with its /v1 (as OpenAI clients take it) works too."""
    return base_url.rstrip("/").removesuffix("/v1")


async def first_model(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1/models")
    response.raise_for_status()
    models = response.json().get("data") or []
    if not models:
        raise ValueError(f"{client.base_url}/v1/models lists no model; name one with --model (model=)")
    return models[0]["id"]


def _seconds(retry_after: str | None) -> float | None:
    """Retry-After in seconds; None when absent or given as an HTTP date."""
    try:
        return float(retry_after) if retry_after is not None else None
    except ValueError:
        return None


def _error_message(body: str) -> str:
    """An OpenAI-style error's message, or the body itself (cut short)."""
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200]


async def send_request(client: httpx.AsyncClient, body: dict, t0: float) -> RequestRecord:
    """Stream one completion, stamping each data chunk on arrival (time.perf_counter() - t0)."""
    chunks: list[tuple[float, int]] = []
    last_choice = usage = status = error = retry_after = None
    send = time.perf_counter() - t0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            status = response.status_code
            if status != 200:
                error = f"HTTP {status}: {_error_message((await response.aread()).decode(errors='replace'))}"
                retry_after = _seconds(response.headers.get("retry-after"))
            else:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):   # blank separators, ": keep-alive" comments
                        continue
                    data = line.removeprefix("data:").strip()
                    if data == "[DONE]":
                        break
                    now = time.perf_counter() - t0
                    event = json.loads(data)
                    if "error" in event:   # an error after the 200 went out, e.g. the server shutting down
                        code = event["error"].get("code")
                        status = code if isinstance(code, int) else status
                        error = f"in the stream: {event['error'].get('message')}"
                        break
                    choices = event.get("choices") or []
                    chunks.append((now, 1 if choices and choices[0].get("text") else 0))
                    last_choice = len(chunks) - 1 if choices else last_choice
                    usage = (event.get("usage") or {}).get("completion_tokens", usage)
    except (httpx.HTTPError, ValueError) as err:   # ValueError: a chunk that is not JSON
        error = f"{type(err).__name__}: {err or 'no detail'}"
    end = time.perf_counter() - t0
    counted = sum(k for _, k in chunks)
    if error is None and usage is not None and usage > counted and last_choice is not None:
        t, k = chunks[last_choice]
        chunks[last_choice] = (t, k + usage - counted)   # EOS and held-back text: see the module's docstring
    if error is None and not any(k for _, k in chunks):
        error = "the stream ended without a token"
    outcome = COMPLETED if error is None else REJECTED if status in REJECTED_STATUSES else FAILED
    return RequestRecord(body["prompt"], body["max_tokens"], send, end, outcome, status, chunks, usage, error,
                         retry_after)


async def benchmark(base_url: str, rate: float | None, num_prompts: int, workload: str = "bard", seed: int = 0,
                    max_tokens: int = 128, model: str | None = None, slo: RequestSlo = SloTarget().per_request(),
                    ignore_eos: bool = False, timeout_s: float = 600.0, metrics: Metrics = stream_metrics,
                    progress: bool = True) -> BenchResult:
    """Send num_prompts requests at `rate` per second (Poisson; None or inf: all at once) to the server at
    base_url and measure them. model: the server's first (GET /v1/models) unless named. slo: the targets
    goodput counts a request against. timeout_s: the longest wait for any one read. metrics: the
    per-request computation (lesson 09's stream_metrics)."""
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be at least 1, not {num_prompts}")
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r} is unknown; use one of {', '.join(WORKLOADS)}")
    rate = None if rate is None or math.isinf(rate) else rate
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0 requests per second (or inf: all at once), not {rate}")
    work = make_workload(num_prompts, WORKLOADS[workload], rate, seed, max_tokens=max_tokens, fixed=max_tokens)
    # As many connections as requests in flight: a pool limit would queue requests in the client, and that
    # queue would show up as the server's TTFT.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    key = os.environ.get("OPENAI_API_KEY")   # a server started with --api-key: the key, as the openai SDK reads it
    async with httpx.AsyncClient(base_url=_api_root(base_url), timeout=httpx.Timeout(timeout_s, connect=10.0),
                                 limits=limits, headers={"Authorization": f"Bearer {key}"} if key else {}) as client:
        model = model or await first_model(client)
        extra = {"ignore_eos": True} if ignore_eos else {}
        bar = tqdm(total=num_prompts, desc=f"rate {rate or 'inf'}", unit="req", disable=not progress)

        async def one(body: dict, t0: float) -> RequestRecord:
            record = await send_request(client, body, t0)
            bar.update()
            return record

        tasks = []
        t0 = time.perf_counter()
        for w in work:
            await asyncio.sleep(max(0.0, t0 + w.arrival_time - time.perf_counter()))
            # The workload's temperature is 0: greedy replies, so a rerun asks the server for the same work.
            body = {"model": model, "prompt": w.prompt, "max_tokens": w.params.max_tokens, "stream": True,
                    "stream_options": {"include_usage": True}, "temperature": w.params.temperature, **extra}
            tasks.append(asyncio.create_task(one(body, t0)))
        records = await asyncio.gather(*tasks)
        bar.close()
    records = [dataclasses.replace(r, metrics=metrics(r.send_time, r.chunks)) for r in records]
    duration = max(r.end_time for r in records) - min(r.send_time for r in records)
    config = dict(base_url=base_url, model=model, rate=rate, num_prompts=num_prompts, workload=workload, seed=seed,
                  max_tokens=max_tokens, ignore_eos=ignore_eos, slo=dataclasses.asdict(slo))
    return BenchResult(config, duration, summarize_records(records, duration, slo), records)


def run_benchmark(*args: Any, **kwargs: Any) -> BenchResult:
    """benchmark(...) from synchronous code. In Jupyter, where an event loop already runs in this thread,
    it runs in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(benchmark(*args, **kwargs))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(benchmark(*args, **kwargs))).result()


def run_sweep(base_url: str, rates: list[float], num_prompts: int, **kwargs: Any) -> list[BenchResult]:
    """The same workload (same seed: same prompts and lengths) at each rate, one run after another."""
    return [run_benchmark(base_url, rate, num_prompts, **kwargs) for rate in rates]


def _ms(x: float | None) -> str:
    return f"{1e3 * x:9.1f}" if x is not None else f"{'-':>9s}"


def _per_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_summary(result: BenchResult) -> str:
    c, s = result.config, result.summary
    rate = "all at once" if c["rate"] is None else f"{c['rate']:g} req/s"
    lines = [(f"{c['num_prompts']} prompts ({c['workload']}, max_tokens {c['max_tokens']}) at {rate} to "
              f"{c['model']} at {c['base_url']}"),
             f"completed {s['completed']}, rejected {s['rejected']}, failed {s['failed']} in {s['duration_s']:.2f} s",
             (f"throughput {_per_s(s['request_throughput'])} req/s, {_per_s(s['output_throughput'])} output tok/s; "
              f"goodput {_per_s(s['goodput'])} req/s ({s['good']} with {RequestSlo(**s['slo']).describe()})"),
             f"{'(ms)':6s}" + "".join(f"{k:>9s}" for k in ("mean", "p50", "p90", "p99"))]
    lines += [f"{name:6s}" + "".join(_ms(s[key][k]) for k in ("mean", "p50", "p90", "p99"))
              for name, key in (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("e2e", "e2e"))]
    errors = sorted({r.error for r in result.requests if r.outcome == FAILED})
    lines += [f"failed: {e}" for e in errors[:5]]
    return "\n".join(lines)


def format_sweep(results: list[BenchResult]) -> str:
    header = (f"{'rate':>8s} {'req/s':>7s} {'tok/s':>8s} {'goodput':>8s} {'rejected':>8s} {'failed':>6s}"
              f" {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p50':>9s} {'ITL p99':>9s}  (ms)")
    lines = [header]
    for r in results:
        s, rate = r.summary, r.config["rate"]
        lines.append(f"{'inf' if rate is None else f'{rate:g}':>8s} {s['request_throughput'] or 0:7.2f} "
                     f"{s['output_throughput'] or 0:8.1f} {s['goodput'] or 0:8.2f} {s['rejected']:8d} {s['failed']:6d}"
                     + "".join(f" {_ms(s[k][p])}" for k in ("ttft", "itl") for p in ("p50", "p99")))
    return "\n".join(lines)


def _rates(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of rates; write e.g. 2,4,8") from None


def _target(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a target: give seconds above 0, or none to leave it out")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench serve`'s options, on the parser the CLI gives."""
    slo = SloTarget()
    parser.add_argument("--base-url", default="http://127.0.0.1:8000",
                        help="the server's root URL, with or without /v1 (default: %(default)s)")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, default=math.inf,
                      help="requests per second, Poisson arrivals; inf sends all at once (default: %(default)s)")
    load.add_argument("--sweep", type=_rates, metavar="R1,R2,...",
                      help="run each of these rates in turn, the same prompts at each")
    parser.add_argument("--num-prompts", type=int, default=100, help="requests per run (default: %(default)s)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="bard",
                        help="bard: Bard's speaker lines, stopping at EOS within max_tokens; fixed: max_tokens for "
                             "every request; heavy: heavy-tailed lengths up to max_tokens (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="prompts, lengths and arrivals (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=128,
                        help="the longest reply; with --workload fixed and --ignore-eos, every reply's length "
                             "(default: %(default)s)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="send ignore_eos (vLLM's and minicb's, not OpenAI's) to force the lengths")
    parser.add_argument("--model", default=None, help="the model to name (default: the server's first)")
    parser.add_argument("--slo-ttft", type=_target, default=slo.ttft_p99_s, metavar="SECONDS",
                        help="goodput target: a request's TTFT within this; none leaves it out (default: %(default)s)")
    parser.add_argument("--slo-itl", type=_target, default=slo.itl_p99_s, metavar="SECONDS",
                        help="goodput target: every inter-token gap of a request within this; none leaves it out "
                             "(default: %(default)s)")
    parser.add_argument("--slo-tpot", type=_target, default=None, metavar="SECONDS",
                        help="goodput target: a request's TPOT, its mean gap, within this, as vLLM's benchmark "
                             "judges (`--goodput tpot:MS`) (default: none)")
    parser.add_argument("--slo-e2e", type=_target, default=None, metavar="SECONDS",
                        help="goodput target: a request's whole reply within this (default: none)")
    parser.add_argument("--output", default=None, help="write the results (a JSON list, one per rate) here")
    parser.add_argument("--plot", default=None, help="with --sweep: save the latency-against-load curve here (.png)")


def run(args: argparse.Namespace, plot_sweep: Callable[[list[BenchResult]], Figure]) -> int:
    """Run `bench serve` as its flags say. plot_sweep draws --plot's figure: drawing is minicb.viz's, which the
    CLI hands in, so that the serving front loads no view of its own."""
    if args.plot and (not args.sweep or any(math.isinf(r) for r in args.sweep)):
        print("error: --plot draws a sweep against the rate: give finite rates with --sweep R1,R2,...",
              file=sys.stderr)
        return 2
    results = []
    try:
        slo = RequestSlo(ttft_s=args.slo_ttft, itl_s=args.slo_itl, tpot_s=args.slo_tpot, e2e_s=args.slo_e2e)
        options = dict(workload=args.workload, seed=args.seed, max_tokens=args.max_tokens, model=args.model,
                       slo=slo, ignore_eos=args.ignore_eos)
        for rate in args.sweep or [args.rate]:
            results.append(run_benchmark(args.base_url, rate, args.num_prompts, **options))
            print(format_summary(results[-1]) + "\n")
        if args.sweep:
            print(format_sweep(results))
        if args.output:
            save_results(results, args.output)
        if args.plot:
            plot_sweep(results).savefig(args.plot, dpi=100)
    except httpx.HTTPError as err:
        print(f"error: {args.base_url}: {type(err).__name__}: {err}; is the server running (python -m minicb serve)?",
              file=sys.stderr)
        return 2
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
