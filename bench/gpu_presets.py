"""The hardware presets' figures: decode flatness, continuous over static batching, the swap crossover.

    .venv/bin/python bench/gpu_presets.py [--seats 192] [--seeds 4] [--whole-run]

The GPU presets are modelled, not measured (minicb/lab/hardware.py states every assumption); the CPU
preset is Bard's fitted StepCost. Everything runs in the simulator, in a minute or two on 2 cores.
- Decode flatness: a step of 1, 64 and 192 decodes, each sequence reading 512 tokens of context.
- Continuous over static: output tokens per simulated second while requests wait (minicb.lab.hardware.
  loaded_throughput), heavy-tailed lengths up to 1,000 tokens, 4 x seats requests, one row per seed;
  --whole-run adds the same ratio over the whole run, the final drain included.
- The recompute-versus-swap crossover of "auto" preemption for Llama-3-8B (GQA, 128 KiB of KV per
  token) and, for contrast, Llama-2-7B (full multi-head attention, 512 KiB), by host link and peak.
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from minicb.engine import LLMEngine
from minicb.lab.hardware import (H100_SXM, LLAMA3_8B, PRESETS, HardwarePreset, RooflineCost, crossover_table,
                             loaded_throughput)
from minicb.lab.workload import WorkloadRequest, make_workload, run_workload
from minicb.stats.metrics import summarize

# Llama-2-7B's shapes: 32 KV heads, one per query head, so 4x Llama-3-8B's KV per token.
LLAMA2_7B = replace(LLAMA3_8B, name="Llama-2-7B", num_kv_heads=32, intermediate_size=11008, vocab_size=32000)


def whole_run_throughput(preset: HardwarePreset, batching: str, work: list[WorkloadRequest], seats: int) -> float:
    engine = LLMEngine(simulate=True, step_cost=preset.step_cost, num_blocks=preset.num_blocks,
                       block_size=preset.block_size, batching=batching, max_num_seqs=seats)
    return summarize(run_workload(engine, work, progress=False), engine.trace)["output_tok_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seats", type=int, default=192)
    ap.add_argument("--seeds", type=int, nargs="+", default=[4])
    ap.add_argument("--whole-run", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/gpu_presets.json"))
    args = ap.parse_args()

    flat = []
    for p in PRESETS.values():
        steps_ms = {b: p.step_cost(b, b * 512) * 1e3 for b in (1, 64, 192)}
        flat.append({"preset": p.name, "num_blocks": p.num_blocks, "step_ms": steps_ms,
                     "64_over_1": steps_ms[64] / steps_ms[1], "192_over_1": steps_ms[192] / steps_ms[1]})
        print(f"{p.name:40s} {p.num_blocks:7,d} blocks  decode step at 512 tokens of context: "
              + "  ".join(f"B={b} {ms:6.2f} ms" for b, ms in steps_ms.items())
              + f"  64/1 = {flat[-1]['64_over_1']:.2f}")

    gains = []
    for seed in args.seeds:
        work = make_workload(4 * args.seats, lengths="heavy", max_tokens=1000, seed=seed)
        for p in PRESETS.values():
            tok_s = {b: loaded_throughput(p, b, work, args.seats) for b in ("static", "continuous")}
            row = {"preset": p.name, "seed": seed, "loaded_tok_per_s": tok_s,
                   "gain": tok_s["continuous"] / tok_s["static"]}
            if args.whole_run:
                whole = {b: whole_run_throughput(p, b, work, args.seats) for b in ("static", "continuous")}
                row["whole_run_gain"] = whole["continuous"] / whole["static"]
            gains.append(row)
            print(f"seed {seed:2d} {p.name:40s} static {tok_s['static']:9,.0f} tok/s  continuous "
                  f"{tok_s['continuous']:9,.0f} tok/s  gain {row['gain']:5.2f}"
                  + (f"  whole run {row['whole_run_gain']:5.2f}" if args.whole_run else ""))
    for p in PRESETS.values():
        g = [r["gain"] for r in gains if r["preset"] == p.name]
        print(f"{p.name:40s} gain over {len(g)} seeds: median {statistics.median(g):.2f}, "
              f"range {min(g):.2f}-{max(g):.2f}")

    crossovers = {}
    for model in (LLAMA3_8B, LLAMA2_7B):
        rows = crossover_table(RooflineCost(model, H100_SXM))
        crossovers[model.name] = rows
        print(f"\n{model.name} on {H100_SXM.name} ({model.kv_bytes_per_token // 1024} KiB of KV per token): "
              f"swap is cheaper than recompute from")
        for r in rows:
            print(f"  {r['peak_tflops']:5.0f} TFLOP/s peak  {r['link']:13s} {r['link_gb_s']:3.0f} GB/s: "
                  f"recompute {r['recompute_us_per_token']:5.1f} us/token, swap {r['swap_us_per_token']:5.1f} "
                  f"us/token -> {r['crossover_tokens']:,.0f} tokens")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seats": args.seats, "flatness": flat, "gains": gains,
                                    "crossovers": crossovers}, indent=2) + "\n")


if __name__ == "__main__":
    main()
