"""Static vs continuous batching on the real Bard model, CPU, natural (EOS) output lengths.

    .venv/bin/python bench/static_vs_continuous.py [--requests 128] [--seats 32]

Three runs serve the same requests with the same seeds; each request has its own generator, so
its output (and length) is the same in all of them:
- "padded": static batching on a dense padded batch, computing the pads (naive `generate`);
- "static": static batching that skips finished rows (they idle, holding their seat and blocks);
- "continuous": iteration-level scheduling.
The ideal ratio is what the lengths alone allow: the padded baseline's seat-steps (every batch
held for its longest member) over the useful ones.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from minicb import LLM
from minicb.lab.workload import make_workload, run_workload
from minicb.stats.metrics import summarize


def ideal_ratio(lengths: list[int], seats: int) -> float:
    batches = [lengths[i:i + seats] for i in range(0, len(lengths), seats)]
    return sum(seats * max(b) for b in batches) / sum(lengths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--seats", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--out", type=Path, default=Path("bench/results/static_vs_continuous.json"))
    args = ap.parse_args()

    work = make_workload(args.requests, lengths="natural", temperature=0.8, max_tokens=args.max_tokens, seed=0)
    results = {}
    for batching in ("padded", "static", "continuous"):
        llm = LLM(None, device="cpu", batching=batching, max_num_seqs=args.seats,
                  num_blocks=args.seats * (args.max_tokens // 16 + 4), max_num_batched_tokens=4096)
        start = time.perf_counter()
        outputs = run_workload(llm.engine, work)
        wall = time.perf_counter() - start
        stats = summarize(outputs, llm.engine.trace)
        results[batching] = {"wall_s": wall, "output_tok_per_s": stats["output_tokens"] / wall, "steps": stats["steps"],
                             "seat_utilization": stats["seat_utilization"], "output_tokens": stats["output_tokens"],
                             "padding_waste": stats["padding_waste"],
                             "lengths": [len(o.outputs[0].token_ids) for o in outputs]}
    lengths = results["static"]["lengths"]
    same = all(r["lengths"] == lengths for r in results.values())
    tok_s = {k: round(v["output_tok_per_s"], 1) for k, v in results.items()}
    ratio = tok_s["continuous"] / tok_s["padded"]
    ideal = ideal_ratio(lengths, args.seats)
    summary = {"requests": args.requests, "seats": args.seats, "same_lengths_in_every_run": same,
               "output_tok_per_s": tok_s, "continuous_over_padded": round(ratio, 2),
               "continuous_over_static": round(tok_s["continuous"] / tok_s["static"], 2),
               "ideal_ratio": round(ideal, 2), "measured_over_ideal": round(ratio / ideal, 2),
               "seat_utilization": {k: round(v["seat_utilization"], 3) for k, v in results.items()},
               "padding_waste": {k: round(v["padding_waste"], 3) for k, v in results.items()},
               "steps": {k: v["steps"] for k, v in results.items()}}
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**summary, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
