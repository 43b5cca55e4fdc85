"""The server against the offline engine, and the server under load, measured from the clients' side.

    .venv/bin/python bench/serve.py [--requests 128] [--seats 32] [--max-tokens 32] [--max-waiting 16]
    .venv/bin/python bench/serve.py --thread-split [--model FOLDER]   # only the engine's thread count

--thread-split measures only the first part, for every split of the cores between torch's threads and
the event loop: LLM.generate with 1..cores threads, and the server with --engine-threads 1..cores.

One run, one machine; every request is a Bard speaker line with a forced length (the benchmark
client's "bard" workload, greedy).
- Overhead: the same requests, all at once, through LLM.generate in this process (with every core, and
  with one core fewer, as the server's engine runs) and through `python -m minicb serve`, streamed
  (the benchmark client) and whole (one JSON answer per request); output tokens per second of each, and
  what HTTP, SSE and the async loop add per token.
- Capacity: the server's request rate with everything queued at once. Then a sweep of Poisson rates
  from 0.25x to 2x capacity, on a server without limits and on one with --max-waiting, with p50/p99
  TTFT and ITL as the clients see them.
- Overload: 1,000 requests at 2x capacity on each server: every request must be answered (completed or
  turned away, none failed), and the pool must end whole (nothing running or waiting, no block in use).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx
import torch

from minicb import LLM, SamplingParams
from minicb.lab.workload import make_workload
from minicb.serve.bench_client import run_benchmark
from minicb.serve.server_process import start_server

SWEEP = (0.25, 0.5, 1.0, 1.5, 2.0)


def offline_tok_per_s(requests: int, seats: int, max_tokens: int, threads: int, model: str | None = None) -> float:
    torch.set_num_threads(threads)
    work = make_workload(requests, "fixed", None, 0, max_tokens=max_tokens, fixed=max_tokens)
    llm = LLM(model, device="cpu", max_num_seqs=seats)
    llm.generate(["ROMEO.\n"], SamplingParams(max_tokens=4), use_tqdm=False)   # warm up, as the server is
    start = time.perf_counter()
    outs = llm.generate([w.prompt for w in work], [SamplingParams(temperature=0, max_tokens=max_tokens,
                                                                  ignore_eos=True) for _ in work], use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - start)


def whole_answers_tok_per_s(url: str, requests: int, max_tokens: int) -> float:
    """Non-streamed requests, all at once: the server's rate without one SSE event per token."""
    work = make_workload(requests, "fixed", None, 0, max_tokens=max_tokens, fixed=max_tokens)

    async def burst() -> float:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
            async def one(prompt: str) -> int:
                body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
                reply = await client.post("/v1/completions", json=body)
                return reply.json()["usage"]["completion_tokens"]
            start = time.perf_counter()
            tokens = await asyncio.gather(*(one(w.prompt) for w in work))
            return sum(tokens) / (time.perf_counter() - start)
    return asyncio.run(burst())


def pool_is_whole(server) -> bool:
    return all(server.metric(f"minicb:{name}") == 0
               for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"))


def row(result, label: str) -> dict:
    s = result.summary
    return {"server": label, "rate": result.config["rate"], "completed": s["completed"], "rejected": s["rejected"],
            "failed": s["failed"], "req_per_s": s["request_throughput"], "tok_per_s": s["output_throughput"],
            "goodput": s["goodput"], **{f"{m}_{q}_ms": (s[m][q] or 0) * 1e3 for m in ("ttft", "itl")
                                          for q in ("p50", "p99")}}


def thread_split(args: argparse.Namespace) -> None:
    """Offline and served output tok/s at each engine thread count, all requests at once, each the best of
    --repeats runs: on a shared machine the best run is the nearest to a quiet one."""
    common = dict(max_tokens=args.max_tokens, workload="fixed", ignore_eos=True, progress=False)
    model = ("--model", args.model) if args.model else ()
    cores = torch.get_num_threads()
    offline = {n: max(offline_tok_per_s(args.requests, args.seats, args.max_tokens, n, args.model)
                      for _ in range(args.repeats)) for n in range(1, cores + 1)}
    best_offline = max(offline.values())
    print(f"{args.requests} requests x {args.max_tokens} tokens, {args.seats} seats, all at once; output tok/s, "
          f"best of {args.repeats}")
    print("| torch threads | LLM.generate | server (--engine-threads) | server / best offline |")
    print("|---|---|---|---|")
    for n in range(1, cores + 1):
        with start_server("--max-num-seqs", str(args.seats), "--engine-threads", str(n), *model) as server:
            run_benchmark(server.url, None, 8, **common)   # warm up
            served = max(run_benchmark(server.url, None, args.requests, **common).summary["output_throughput"]
                         for _ in range(args.repeats))
        print(f"| {n} | {offline[n]:.0f} | {served:.0f} | {served / best_offline:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--seats", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-waiting", type=int, default=16)
    ap.add_argument("--overload-requests", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/serve.json"))
    ap.add_argument("--thread-split", action="store_true", help="measure only the engine's thread count")
    ap.add_argument("--model", default=None, help="for --thread-split: a model folder (default: Bard)")
    ap.add_argument("--repeats", type=int, default=3, help="for --thread-split: runs per figure, the best kept")
    args = ap.parse_args()
    if args.thread_split:
        return thread_split(args)
    common = dict(max_tokens=args.max_tokens, workload="fixed", ignore_eos=True, progress=False)

    cores = torch.get_num_threads()
    offline = offline_tok_per_s(args.requests, args.seats, args.max_tokens, cores)
    offline_as_served = offline_tok_per_s(args.requests, args.seats, args.max_tokens, max(1, cores - 1))
    report: dict = {"requests": args.requests, "seats": args.seats, "max_tokens": args.max_tokens}
    with start_server("--max-num-seqs", str(args.seats)) as free, \
            start_server("--max-num-seqs", str(args.seats), "--max-waiting", str(args.max_waiting)) as limited:
        run_benchmark(free.url, None, 8, **common)   # warm up
        burst = run_benchmark(free.url, None, args.requests, **common)
        served = burst.summary["output_throughput"]
        whole = whole_answers_tok_per_s(free.url, args.requests, args.max_tokens)
        capacity = burst.summary["request_throughput"]
        report["overhead"] = {"threads": cores, "offline_tok_per_s": offline,
                              "offline_one_core_fewer_tok_per_s": offline_as_served,
                              "server_streamed_tok_per_s": served, "server_whole_tok_per_s": whole,
                              "added_us_per_token": 1e6 * (1 / served - 1 / offline_as_served)}
        print(f"{args.requests} requests x {args.max_tokens} tokens, {args.seats} seats, all at once (tok/s)")
        print(f"LLM.generate, {cores} threads {offline:7.0f}   {max(1, cores - 1)} threads {offline_as_served:7.0f}")
        print(f"server, streamed {served:7.0f}   whole answers {whole:7.0f}   "
              f"({report['overhead']['added_us_per_token']:.0f} us added per streamed token)")
        print(f"capacity: {capacity:.1f} req/s\n")

        report["sweep"] = []
        print("| server | rate | completed | rejected | tok/s | goodput | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for label, server in (("no limit", free), (f"--max-waiting {args.max_waiting}", limited)):
            for share in SWEEP:
                r = row(run_benchmark(server.url, share * capacity, args.requests, seed=1, **common), label)
                report["sweep"].append({"share_of_capacity": share, **r})
                print(f"| {label} | {share:g}x ({r['rate']:.0f}/s) | {r['completed']} | {r['rejected']} | "
                      f"{r['tok_per_s']:.0f} | {r['goodput']:.1f} | {r['ttft_p50_ms']:.0f} ms | "
                      f"{r['ttft_p99_ms']:.0f} ms | {r['itl_p50_ms']:.0f} ms | {r['itl_p99_ms']:.0f} ms |")

        report["overload"] = []
        print(f"\n{args.overload_requests} requests at 2x capacity ({2 * capacity:.0f}/s):")
        for label, server in (("no limit", free), (f"--max-waiting {args.max_waiting}", limited)):
            r = row(run_benchmark(server.url, 2 * capacity, args.overload_requests, seed=2, **common), label)
            deadline = time.monotonic() + 30
            while not pool_is_whole(server) and time.monotonic() < deadline:
                time.sleep(0.1)
            r["answered"] = r["completed"] + r["rejected"]
            r["pool_whole"] = pool_is_whole(server)
            r["server_alive"] = server.process.poll() is None
            report["overload"].append(r)
            print(f"  {label:16} answered {r['answered']} of {args.overload_requests} ({r['completed']} completed, "
                  f"{r['rejected']} turned away, {r['failed']} failed); pool whole: {r['pool_whole']}; "
                  f"server alive: {r['server_alive']}; TTFT p99 {r['ttft_p99_ms']:.0f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
