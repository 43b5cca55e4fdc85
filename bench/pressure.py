"""The engine under pressure: preemption's tail, recompute vs swap, chunked prefill's ITL, overload.

    .venv/bin/python bench/pressure.py            # a few minutes on 2 CPU cores

1. p50/p99 latency with and without preemption, on a workload that oversubscribes the KV pool
   (simulated, 2,000 requests; and real Bard, 96 requests).
2. Recompute vs swap time for one preempted sequence as a function of its context length, from
   the cost model measured on this device (measure_preemption_cost), and where each way back is cheaper.
3. Decoders' ITL p99 with chunked prefill off and on while long prompts arrive (real Bard).
4. Goodput under 2x overload, with and without admission limits (simulated).
"""
from __future__ import annotations

import json
from pathlib import Path

from minicb import LLMEngine, SamplingParams
from minicb.lab.preemption_ranges import describe, ranges
from minicb.lab.workload import WorkloadRequest, bard_prompts, make_workload, run_workload
from minicb.runner.model_runner import measure_preemption_cost
from minicb.scheduler.request import RequestOutput
from minicb.stats.metrics import percentile, summarize

RESULTS = {}


def run(workload, **config) -> tuple[dict, list[RequestOutput]]:
    engine = LLMEngine(device="cpu", **config)
    outputs = run_workload(engine, workload, progress=False)
    stats = summarize(outputs, engine.trace)
    stats["preemptions"] = sum(len(s.preempted) for s in engine.trace.steps)
    stats["rejected"] = sum(o.outputs[0].finish_reason == "rejected" for o in outputs)
    return stats, outputs


def preemption_tail() -> None:
    print("1. latency with and without preemption (KV pool oversubscribed)")
    for label, n, simulate, rate in (("simulated", 2000, True, 60.0), ("real Bard", 96, False, None)):
        work = make_workload(n, lengths="heavy", rate=rate, seed=2, max_tokens=400)
        rows = {}
        for pool, blocks in (("ample pool", 4096), ("small pool", 96)):
            stats, _ = run(work, simulate=simulate, max_num_seqs=32, num_blocks=blocks)
            rows[pool] = {k: stats[k] for k in ("preemptions",)} | {
                "e2e_p50_s": round(stats["e2e"]["p50"], 3), "e2e_p99_s": round(stats["e2e"]["p99"], 3)}
            print(f"   {label:10s} {pool:10s} preemptions {stats['preemptions']:5d}  "
                  f"e2e p50 {stats['e2e']['p50']:7.3f} s  p99 {stats['e2e']['p99']:7.3f} s")
        RESULTS[f"preemption_tail_{label}"] = rows


def recompute_vs_swap() -> None:
    print("2. recompute vs swap per preempted sequence (Bard, this CPU)")
    engine = LLMEngine(device="cpu", num_blocks=256, preemption_mode="swap", swap_space_mb=64)
    cost = measure_preemption_cost(engine.runner)
    table = {t: (cost.recompute_s(t), cost.swap_s(t)) for t in (16, 64, 256, 1024)}
    for t, (rec, swap) in table.items():
        print(f"   context {t:5d}: recompute {rec * 1e3:8.3f} ms   swap (out + in) {swap * 1e3:8.3f} ms")
    print(f"   the cheaper way back, by context length: {describe(cost)}")
    RESULTS["recompute_vs_swap"] = {"cost_model": cost.__dict__, "ranges": ranges(cost),
                                    "ms": {t: [round(r * 1e3, 3), round(s * 1e3, 3)] for t, (r, s) in table.items()}}


def chunked_prefill_itl() -> None:
    print("3. decoders' ITL p99 while long prompts arrive (real Bard)")
    decoders = [WorkloadRequest(p, SamplingParams(temperature=0, max_tokens=200, ignore_eos=True), 0.0)
                for p in bard_prompts(16, seed=4)]
    long_prompt = " ".join(["Now is the winter of our discontent made glorious summer."] * 40)
    arrivals = [WorkloadRequest(long_prompt, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), t)
                for t in (0.3, 0.6, 0.9, 1.2)]
    rows = {}
    for chunked in (False, True):
        stats, outputs = run(decoders + arrivals, max_num_seqs=32, max_num_batched_tokens=1024 if not chunked else 128,
                            enable_chunked_prefill=chunked, num_blocks=1024)
        itl = [gap for o in outputs if len(o.outputs[0].token_ids) == 200 for gap in o.metrics.itl]
        rows["chunked" if chunked else "unchunked"] = {"itl_p50_ms": round(percentile(itl, 50) * 1e3, 2),
                                                     "itl_p99_ms": round(percentile(itl, 99) * 1e3, 2)}
        print(f"   chunked prefill {'on ' if chunked else 'off'}: ITL p50 {percentile(itl, 50) * 1e3:6.2f} ms  "
              f"p99 {percentile(itl, 99) * 1e3:6.2f} ms")
    RESULTS["chunked_prefill_itl"] = rows


def overload_goodput(slo_s: float = 2.0) -> None:
    print(f"4. goodput under 2x overload (simulated; SLO: end-to-end <= {slo_s} s)")
    probe, _ = run(make_workload(1000, lengths="heavy", seed=5, max_tokens=300), simulate=True, max_num_seqs=32,
                   num_blocks=2048)
    capacity = probe["requests_per_s"]
    work = make_workload(3000, lengths="heavy", rate=2 * capacity, seed=6, max_tokens=300)
    rows = {}
    for label, limits in (("no limits", {}), ("max_queue_delay_s=0.5", {"max_queue_delay_s": 0.5})):
        stats, outputs = run(work, simulate=True, max_num_seqs=32, num_blocks=2048, **limits)
        on_time = sum(1 for o in outputs
                      if o.outputs[0].finish_reason in ("stop", "length") and o.metrics.e2e_latency <= slo_s)
        span = stats["duration_s"]
        rows[label] = {"served": stats["served"], "rejected": stats["rejected"], "on_time": on_time,
                       "goodput_req_per_s": round(on_time / span, 2), "e2e_p99_s": round(stats["e2e"]["p99"], 2)}
        print(f"   {label:22s} served {stats['served']:5d}  rejected {stats['rejected']:5d}  within SLO {on_time:5d}  "
              f"goodput {on_time / span:6.2f} req/s  e2e p99 {stats['e2e']['p99']:7.2f} s")
    RESULTS["overload"] = {"capacity_req_per_s": round(capacity, 2), "arrival_rate": round(2 * capacity, 2), **rows}


def main() -> None:
    preemption_tail()
    recompute_vs_swap()
    chunked_prefill_itl()
    overload_goodput()
    out = Path("bench/results/pressure.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(RESULTS, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
