"""Fit the simulator's step-cost model to real Bard steps on this machine.

    .venv/bin/python bench/fit_step_cost.py [--compile]

Runs a mixed workload (prefills and decodes at many batch sizes) for real, fits
seconds = fixed + per_token * tokens + per_context_token * context tokens by least squares, and
prints the StepCost to use (minicb.costs.StepCost's defaults come from this script, on the eager engine
the lessons run; --compile fits EngineConfig.compile=True instead, after a first pass that compiles).
"""
from __future__ import annotations

import argparse
import json

import torch

from minicb import LLM
from minicb.costs import StepCost
from minicb.lab.workload import make_workload, run_workload


def fit_step_cost(steps: list[dict]) -> StepCost:
    """Least-squares fit of StepCost to real steps (trace rows with duration, num_tokens, context_tokens)."""
    x = torch.tensor([[1.0, s["num_tokens"], s["context_tokens"]] for s in steps], dtype=torch.float64)
    y = torch.tensor([s["duration"] for s in steps], dtype=torch.float64)
    coef = torch.linalg.lstsq(x, y[:, None]).solution[:, 0].clamp(min=0).tolist()
    return StepCost(*coef)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--compile", action="store_true", help="fit EngineConfig.compile=True's steps")
    args = ap.parse_args()
    llm = LLM(None, device="cpu", max_num_seqs=48, num_blocks=4096, compile=args.compile)
    work = make_workload(160, lengths="heavy", rate=40.0, seed=7, max_tokens=256)
    if args.compile:
        run_workload(llm.engine, work)   # compiles; the fit below is of the second pass
    first = llm.engine.trace.num_steps
    run_workload(llm.engine, work)
    rows = llm.engine.trace.to_rows()[first - llm.engine.trace.num_dropped_steps + 5:]   # skip warm-up steps
    cost = fit_step_cost(rows)
    errors = [abs(cost(r["num_tokens"], r["context_tokens"]) - r["duration"]) / r["duration"] for r in rows]
    print(json.dumps({"steps": len(rows), "fixed": cost.fixed, "per_token": cost.per_token,
                      "per_context_token": cost.per_context_token,
                      "median_relative_error": sorted(errors)[len(errors) // 2]}, indent=2))


if __name__ == "__main__":
    main()
