"""minicb's decode step against its matmul floor, side by side in one run.

    .venv/bin/python bench/floor.py [--model smollm2] [--repeats 10] [--attn-backend flex] [--no-fit-threads]

The floor is the step's matmuls alone: every nn.Linear of the loaded model (for a Llama: fused QKV, O,
gate/up and down of every layer, and the LM head, tied or not), on random activations of the batch's shape,
in the model's dtype, eager, on torch's threads. No norms, RoPE, attention, KV cache or engine: what a
step could cost if everything but its arithmetic on the weights were free.

For 1, 16 and 64 sequences decoding (contexts of 24-100 random tokens after a Bard speaker line), it
alternates one floor pass and one engine decode step (decode only, every prefill done before), `repeats`
times, and prints the medians: the whole step, the forward inside it, the floor, and step / floor.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from overhead import decoding_engine, time_steps  # noqa: E402

BATCHES = (1, 16, 64)
FILLER = (24, 100)   # random tokens after the speaker line: contexts of a few dozen to ~100 tokens


def step_matmuls(model: nn.Module, num_rows: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """(activation, weight, bias) for every nn.Linear of the model, each activation random of (num_rows, in)."""
    linears = {id(m): m for m in model.modules() if isinstance(m, nn.Linear)}.values()
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(num_rows, m.in_features, generator=g).to(m.weight), m.weight, m.bias) for m in linears]


@torch.inference_mode()
def floor_pass(matmuls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> float:
    """Seconds for one pass of the step's matmuls."""
    start = time.perf_counter()
    for x, weight, bias in matmuls:
        F.linear(x, weight, bias)
    return time.perf_counter() - start


def measure(num_seqs: int, repeats: int, model: str | None, **engine_options) -> dict:
    engine = decoding_engine(num_seqs, repeats + 4, seed=num_seqs, model=model, filler=FILLER, **engine_options)
    matmuls = step_matmuls(engine.runner.model, num_seqs)
    floor_pass(matmuls)   # warm-up: first-call allocations
    floors, steps, forwards = [], [], []
    for _ in range(repeats):   # alternated, so drift in the machine's load reaches both alike
        floors.append(floor_pass(matmuls))
        step, forward = time_steps(engine, 1)
        steps.append(step)
        forwards.append(forward)
    contexts = [req.num_tokens for req in engine.requests.values()]
    ms = {name: 1e3 * statistics.median(values) for name, values in
          (("step_ms", steps), ("forward_ms", forwards), ("floor_ms", floors))}
    return {**{k: round(v, 2) for k, v in ms.items()}, "step_over_floor": round(ms["step_ms"] / ms["floor_ms"], 2),
            "forward_over_floor": round(ms["forward_ms"] / ms["floor_ms"], 2),
            "weights_mb": round(sum(w.numel() * w.element_size() for _, w, _ in matmuls) / 2**20, 1),
            "matmuls": len(matmuls), "contexts": [min(contexts), max(contexts)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="what MINICB_MODEL takes (smollm2, a folder...); default: Bard")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seqs", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--attn-backend", default="torch", help="EngineConfig.attn_backend (flex: bench/README.md)")
    ap.add_argument("--fit-threads", action=argparse.BooleanOptionalAction, default=True,
                    help="EngineConfig.fit_threads: --no-fit-threads shows two threads collapse on a busy machine")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/floor[_MODEL].json")
    args = ap.parse_args()
    args.out = args.out or Path(f"bench/results/floor{'_' + Path(args.model).name if args.model else ''}.json")
    rows = {n: measure(n, args.repeats, args.model, attn_backend=args.attn_backend, fit_threads=args.fit_threads)
            for n in args.seqs}
    print(f"{args.model or 'bard'}, attn_backend={args.attn_backend}: decode step against its "
          f"{rows[args.seqs[0]]['matmuls']} matmuls ({rows[args.seqs[0]]['weights_mb']} MB of weights), median of {args.repeats}, "
          f"torch threads={torch.get_num_threads()}")
    print(f"{'seqs':>4s} {'step ms':>8s} {'forward ms':>10s} {'floor ms':>9s} {'step/floor':>10s} {'fwd/floor':>9s}")
    for n, r in rows.items():
        print(f"{n:4d} {r['step_ms']:8.2f} {r['forward_ms']:10.2f} {r['floor_ms']:9.2f} "
              f"{r['step_over_floor']:10.2f} {r['forward_over_floor']:9.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model or "bard", "repeats": args.repeats,
                                    "threads": torch.get_num_threads(), "batches": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
