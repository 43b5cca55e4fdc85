"""What EngineConfig.compile costs and what it pays, on Bard on this machine.

    .venv/bin/python bench/compile.py [--requests 32]

Three fresh processes serve the same workload twice each (heavy-tailed lengths, 16 seats):
- eager;
- compiled, cold: an empty inductor cache (TORCHINDUCTOR_CACHE_DIR in a new temporary folder), as on the
  first run on a machine;
- compiled, warm: a second process on that cache, as on every later run.
A compiled engine's first pass includes compiling its graphs; its second pass is what a long run sees.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(requests: int, compile: bool) -> dict:
    from minicb import LLM
    from minicb.lab.workload import make_workload

    work = make_workload(requests, lengths="heavy", seed=0, max_tokens=256)
    llm = LLM(None, device="cpu", max_num_seqs=16, num_blocks=4096, compile=compile)
    prompts, params = [w.prompt for w in work], [w.params for w in work]
    passes = []
    for _ in range(2):
        steps, start = llm.engine.trace.num_steps, time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        passes.append((time.perf_counter() - start, llm.engine.trace.num_steps - steps))
    (first, _), (second, steps) = passes
    return {"first_pass_s": round(first, 2), "second_pass_s": round(second, 2),
            "ms_per_step": round(1e3 * second / steps, 2)}


def run_child(requests: int, compile: bool, cache: str | None = None) -> dict:
    env = {**os.environ, **({"TORCHINDUCTOR_CACHE_DIR": cache} if cache else {})}
    out = subprocess.run([sys.executable, __file__, "--child", "--requests", str(requests),
                          *(["--compile"] if compile else [])], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("bench/results/compile.json"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.requests, args.compile)))
        return
    with tempfile.TemporaryDirectory() as cache:
        rows = {"eager": run_child(args.requests, False),
                "compiled, cold cache": run_child(args.requests, True, cache),
                "compiled, warm cache": run_child(args.requests, True, cache)}
    print(f"{args.requests} requests twice, 16 seats, Bard on the CPU")
    print(f"{'':22s} {'1st pass s':>11s} {'2nd pass s':>11s} {'ms/step':>8s}")
    for name, r in rows.items():
        print(f"{name:22s} {r['first_pass_s']:11.2f} {r['second_pass_s']:11.2f} {r['ms_per_step']:8.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"requests": args.requests, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
