"""Where a decode step's time goes, by kind of work: the profile behind bench/README.md's "where the rest goes".

    .venv/bin/python bench/profile_step.py [--seqs 16] [--compile] [--model smollm2]

Runs decode steps of `seqs` sequences of Bard (or --model, what MINICB_MODEL takes) (mixed context lengths) under torch.profiler and sums each op's
own CPU time into kinds: the projections' matmuls, SDPA, the paged KV cache's scatter and gather, the norms,
everything else inside the forward (small ops: RoPE, SwiGLU, residual adds, views; compiled, the generated
kernels), and the engine's own
Python around the forward (scheduling, batch building, sampling, detokenizing), which is the step's wall
time minus the forward's.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from overhead import decoding_engine, time_steps  # noqa: E402

KINDS = {  # the outermost aten op of each kind of work -> kind (its CPU time includes the ops it calls)
    "aten::mm": "matmul (projections, LM head)",
    "aten::addmm": "matmul (projections, LM head)", "mkldnn::_linear_pointwise": "matmul (projections, LM head)",
    "aten::scaled_dot_product_attention": "SDPA",
    "aten::index_select": "KV cache scatter and gather", "aten::index_copy_": "KV cache scatter and gather",
    "aten::index_fill_": "KV cache scatter and gather",
    "aten::rms_norm": "RMSNorm",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--model", default=None, help="what MINICB_MODEL takes (smollm2, a folder...); default: Bard")
    ap.add_argument("--top", type=int, default=0, help="also list the N aten ops with the most own CPU time")
    args = ap.parse_args()
    engine = decoding_engine(args.seqs, 3 * args.steps, args.compile, model=args.model, filler=(24, 100))
    step_s, forward_s = time_steps(engine, args.steps)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            engine.step()
    events = {event.key: event for event in prof.key_averages()}
    spent = defaultdict(float)   # kind -> CPU microseconds, the ops it calls included
    for key, kind in KINDS.items():
        if key in events:
            spent[kind] += events[key].cpu_time_total
    ops_total = sum(event.self_cpu_time_total for event in events.values())
    # The profiler slows small ops down more than big ones, so each kind's share of the profiled op time
    # is applied to the forward's unprofiled time.
    inside = {kind: us / ops_total * forward_s for kind, us in spent.items()}
    other = "the generated kernels (norms, RoPE, SwiGLU, adds)" if args.compile else "RoPE, SwiGLU, adds, views"
    inside[f"other work in the forward: {other}, Python"] = forward_s - sum(inside.values())
    inside["engine outside the forward (scheduling, batch, sampling, text)"] = step_s - forward_s
    print(f"{args.model or 'bard'}: {args.seqs} sequences decoding, {'compiled' if args.compile else 'eager'}: "
          f"{step_s * 1e3:.2f} ms a step, {forward_s * 1e3:.2f} ms of it in the forward")
    for kind, seconds in sorted(inside.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:66s} {seconds * 1e3:6.2f} ms  {100 * seconds / step_s:5.1f}%")
    if args.top:
        print(f"the {args.top} ops with the most own CPU time, per step (profiled, so small ops look slower):")
        for event in sorted(events.values(), key=lambda e: -e.self_cpu_time_total)[:args.top]:
            print(f"  {event.key:48s} {event.self_cpu_time_total / args.steps / 1e3:7.2f} ms "
                  f"{event.count // args.steps:6d} calls")


if __name__ == "__main__":
    main()
