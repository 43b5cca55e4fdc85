"""Prefix caching on real Bard: a shared prologue against none, caching off and on, one run each.

    .venv/bin/python bench/prefix.py [--requests 48] [--rate 8] [--seats 16] [--pool 64]

Every request is Romeo and Juliet's Prologue (218 of Bard's tokens) and a speaker line, arriving as a
Poisson process, 32 forced output tokens each (minicb.lab.workload.with_prologue). For contrast, the same
words shuffled per request: prompts as long, with nothing to share.
- At the default pool: prefill tokens computed, the hit rate, output tok/s (wall), TTFT p50/p99.
- At a pool of --pool blocks, every request arriving at once: the most requests running at once, as
  sharing frees blocks, and the time to serve them all.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from minicb import LLMEngine
from minicb.lab.workload import make_workload, run_workload, with_prologue
from minicb.stats.metrics import summarize


def measure(work, caching: bool, **config) -> dict:
    engine = LLMEngine(device="cpu", enable_prefix_caching=caching, **config)
    start = time.perf_counter()
    outputs = run_workload(engine, work, progress=False)
    wall = time.perf_counter() - start
    s = summarize(outputs, engine.trace)
    return {"prefill_tokens": sum(r.prefill_tokens for r in engine.trace.steps),
            "cached_tokens": sum(o.num_cached_tokens for o in outputs), "hit_rate": s["prefix_cache_hit_rate"],
            "tok_per_s": s["output_tokens"] / wall, "ttft_p50_ms": 1e3 * s["ttft"]["p50"],
            "ttft_p99_ms": 1e3 * s["ttft"]["p99"], "steps": s["steps"], "wall_s": wall,
            "peak_running": max(r.useful_seats for r in engine.trace.steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--seats", type=int, default=16)
    ap.add_argument("--pool", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("bench/results/prefix.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)   # the same numbers with other programs on the cores
    base = make_workload(args.requests, "fixed", args.rate, seed=0, fixed=32)
    rows = []
    print(f"{args.requests} requests at {args.rate:g}/s, prologue of 218 tokens + a speaker line, 32 tokens out, "
          f"{args.seats} seats")
    print("| prompts | caching | prefill tokens computed | hit rate | tok/s | TTFT p50 | TTFT p99 |")
    print("|---|---|---|---|---|---|---|")
    for shared in (True, False):
        work = with_prologue(base, 1 if shared else None)
        for caching in (False, True):
            r = {"shared": shared, "caching": caching, **measure(work, caching, max_num_seqs=args.seats)}
            rows.append(r)
            print(f"| {'shared prologue' if shared else 'shuffled, no sharing'} | {'on' if caching else 'off'} | "
                  f"{r['prefill_tokens']:,} | {r['hit_rate']:.0%} | {r['tok_per_s']:.0f} | {r['ttft_p50_ms']:.0f} ms | "
                  f"{r['ttft_p99_ms']:.0f} ms |")
    print(f"\nAt a pool of {args.pool} blocks ({args.pool * 16} token slots), shared prologue, all at once:")
    work = with_prologue(make_workload(args.requests, "fixed", None, seed=0, fixed=32))
    pool = []
    for caching in (False, True):
        r = {"caching": caching, **measure(work, caching, max_num_seqs=args.seats, num_blocks=args.pool,
                                           max_model_len=args.pool * 16)}
        pool.append(r)
        print(f"  caching {'on ' if caching else 'off'}: at most {r['peak_running']} running at once, "
              f"{r['steps']} steps, {r['wall_s']:.1f} s, TTFT p99 {r['ttft_p99_ms']:.0f} ms, "
              f"{r['tok_per_s']:.0f} tok/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": vars(args) | {"out": str(args.out)}, "rows": rows, "pool": pool},
                                   indent=2) + "\n")


if __name__ == "__main__":
    main()
