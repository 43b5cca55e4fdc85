"""Fit the simulator's step-cost model to real Bard steps on this machine.

    .venv/bin/python bench/fit_step_cost.py

Runs a mixed workload (prefills and decodes at many batch sizes) for real, fits
seconds = fixed + per_token * tokens + per_context_token * context tokens by least squares, and
prints the StepCost to use (minicb.simulator.StepCost's defaults come from this script).
"""
from __future__ import annotations

import json

from minicb import LLM
from minicb.costs import fit_step_cost
from minicb.workload import make_workload, run_workload


def main() -> None:
    llm = LLM(None, device="cpu", max_num_seqs=48, num_blocks=4096)
    run_workload(llm.engine, make_workload(160, lengths="heavy", rate=40.0, seed=7, max_tokens=256))
    rows = llm.engine.trace.to_rows()[5:]   # skip warm-up steps
    cost = fit_step_cost(rows)
    errors = [abs(cost(r["num_tokens"], r["context_tokens"]) - r["duration"]) / r["duration"] for r in rows]
    print(json.dumps({"steps": len(rows), "fixed": cost.fixed, "per_token": cost.per_token,
                      "per_context_token": cost.per_context_token,
                      "median_relative_error": sorted(errors)[len(errors) // 2]}, indent=2))


if __name__ == "__main__":
    main()
