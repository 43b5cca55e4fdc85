"""minicb's decode step against its matmul floor, side by side in one run.

    .venv/bin/python bench/floor.py [--model smollm2] [--repeats 10] [--attn-backend flex] [--no-fit-threads]
                                    [--no-pack-weights]

The floor is the step's matmuls alone: every nn.Linear of the loaded model (for a Llama: fused QKV, O,
gate/up and down of every layer, and the LM head, tied or not), on random activations of the batch's shape,
in the model's dtype, eager F.linear on the dense weights, on torch's threads. No norms, RoPE, attention,
KV cache or engine: what a step could cost if everything but its arithmetic on the weights were free.
Where the engine packs its weights for oneDNN (EngineConfig.pack_weights), a second floor times the
engine's own packed matmuls: the step's distance from it is the cost of everything else.

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

from minicb.model.packed_linear import PackedLinear  # noqa: E402

BATCHES = (1, 16, 64)
FILLER = (24, 100)   # random tokens after the speaker line: contexts of a few dozen to ~100 tokens


def step_matmuls(model: nn.Module, num_rows: int) -> list[tuple[torch.Tensor, nn.Linear]]:
    """(activation, module) for every nn.Linear of the model, each activation random of (num_rows, in)."""
    linears = {id(m): m for m in model.modules() if isinstance(m, nn.Linear)}.values()
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(num_rows, m.in_features, generator=g).to(m.weight), m) for m in linears]


@torch.inference_mode()
def floor_pass(matmuls: list[tuple[torch.Tensor, nn.Linear]], packed: bool = False) -> float:
    """Seconds for one pass of the step's matmuls: F.linear on the dense weights, or the engine's modules."""
    start = time.perf_counter()
    for x, m in matmuls:
        m(x) if packed else F.linear(x, m.weight, m.bias)
    return time.perf_counter() - start


def measure(num_seqs: int, repeats: int, model: str | None, **engine_options) -> dict:
    engine = decoding_engine(num_seqs, repeats + 4, seed=num_seqs, model=model, filler=FILLER, **engine_options)
    matmuls = step_matmuls(engine.runner.model, num_seqs)
    packed = any(isinstance(m, PackedLinear) and m.packed is not None for _, m in matmuls)
    floor_pass(matmuls), floor_pass(matmuls, packed)   # warm-up: first-call allocations
    times = {"step_ms": [], "forward_ms": [], "floor_ms": [], "packed_floor_ms": []}
    for _ in range(repeats):   # alternated, so drift in the machine's load reaches all alike
        times["floor_ms"].append(floor_pass(matmuls))
        if packed:
            times["packed_floor_ms"].append(floor_pass(matmuls, packed=True))
        step, forward = time_steps(engine, 1)
        times["step_ms"].append(step)
        times["forward_ms"].append(forward)
    contexts = [req.num_tokens for req in engine.requests.values()]
    ms = {name: round(1e3 * statistics.median(values), 2) for name, values in times.items() if values}
    ratios = {f"{name}_over_{floor}": round(ms[f"{name}_ms"] / ms[f"{floor}_ms"], 2)
              for name in ("step", "forward") for floor in ("floor", "packed_floor") if f"{floor}_ms" in ms}
    return {**ms, **ratios, "weights_mb": round(sum(m.weight.numel() * m.weight.element_size()
                                                     for _, m in matmuls) / 2**20, 1),
            "matmuls": len(matmuls), "contexts": [min(contexts), max(contexts)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="what MINICB_MODEL takes (smollm2, a folder...); default: Bard")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seqs", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--attn-backend", default="torch", help="EngineConfig.attn_backend (flex: bench/README.md)")
    ap.add_argument("--fit-threads", action=argparse.BooleanOptionalAction, default=True,
                    help="EngineConfig.fit_threads: --no-fit-threads shows two threads collapse on a busy machine")
    ap.add_argument("--pack-weights", action=argparse.BooleanOptionalAction, default=True,
                    help="EngineConfig.pack_weights: --no-pack-weights runs the step's matmuls on MKL")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/floor[_MODEL].json")
    args = ap.parse_args()
    args.out = args.out or Path(f"bench/results/floor{'_' + Path(args.model).name if args.model else ''}.json")
    rows = {n: measure(n, args.repeats, args.model, attn_backend=args.attn_backend, fit_threads=args.fit_threads,
                    pack_weights=args.pack_weights)
            for n in args.seqs}
    first = rows[args.seqs[0]]
    print(f"{args.model or 'bard'}, attn_backend={args.attn_backend}: decode step against its "
          f"{first['matmuls']} matmuls ({first['weights_mb']} MB of weights), median of {args.repeats}, "
          f"torch threads={torch.get_num_threads()}")
    packed = "packed_floor_ms" in first
    print(f"{'seqs':>4s} {'step ms':>8s} {'forward ms':>10s} {'floor ms':>9s} {'step/floor':>10s} {'fwd/floor':>9s}"
          + (f" {'packed floor ms':>15s} {'step/packed':>11s}" if packed else ""))
    for n, r in rows.items():
        print(f"{n:4d} {r['step_ms']:8.2f} {r['forward_ms']:10.2f} {r['floor_ms']:9.2f} "
              f"{r['step_over_floor']:10.2f} {r['forward_over_floor']:9.2f}"
              + (f" {r['packed_floor_ms']:15.2f} {r['step_over_packed_floor']:11.2f}" if packed else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model or "bard", "repeats": args.repeats,
                                    "threads": torch.get_num_threads(), "batches": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
