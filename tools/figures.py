"""Make the README's figures from the widgets' own export (minicb.viz), on seeded simulator runs.

    python tools/figures.py            # writes docs/figures/*.gif / *.png (what `make figures` runs)
    python tools/figures.py --out DIR  # somewhere else

The simulator runs the real scheduler, block manager and batch builder with a step-cost model fitted on
Bard, and the workloads are seeded, so every run draws the same figures. Output lengths are "heavy":
log-normal with the Bard corpus's median and p90, the spread that makes static batching wasteful.

- seats_static_vs_continuous.gif  the SeatOccupancy grid of one workload, static vs continuous, side by side
- kv_contiguous_vs_paged.png      the KVBlockMap of one workload mid-run, contiguous vs paged reservation
- latency_static_vs_continuous.png  latency_cdf: end-to-end latency of each request, static vs continuous
"""
from __future__ import annotations

import argparse
from pathlib import Path

from minicb import LLMEngine
from minicb.lab.workload import make_workload, run_workload
from minicb.stats.metrics import summarize
from minicb.viz import latency_cdf, save_gif, save_png

ROOT = Path(__file__).resolve().parent.parent
SEATS = 4          # the occupancy GIF: 10 requests, 4 seats, every third step (72 frames)
SEAT_WORK = {"n": 10, "lengths": "heavy", "seed": 1, "max_tokens": 200}
KV_WORK = {"n": 12, "lengths": "heavy", "seed": 1, "max_tokens": 200}   # 8 seats, 48 blocks of 16, model length 256
KV_STEP = 20
LATENCY_WORK = {"n": 64, "lengths": "heavy", "seed": 0, "max_tokens": 512}   # 8 seats


def run(work: dict, **engine_args):
    engine = LLMEngine(simulate=True, device="cpu", **engine_args)
    outs = run_workload(engine, make_workload(**work), progress=False)
    return outs, engine.trace


def seats_gif(out: Path) -> Path:
    runs = {b: run(SEAT_WORK, batching=b, max_num_seqs=SEATS) for b in ("static", "continuous")}
    titles = []
    for name, (outs, trace) in runs.items():
        s = summarize(outs, trace)
        titles.append(f"{name}: {s['steps']} steps, {s['seat_utilization']:.0%} of seat-steps busy")
    path = out / "seats_static_vs_continuous.gif"
    save_gif("seats", [trace for _, trace in runs.values()], str(path), every=3, titles=titles)
    return path


def kv_png(out: Path) -> Path:
    traces = {r: run(KV_WORK, max_num_seqs=8, num_blocks=48, max_model_len=256, kv_reservation=r,
                     trace_kv_blocks=True)[1] for r in ("contiguous", "paged")}
    titles = []
    for name, trace in traces.items():
        record = trace.steps[KV_STEP]
        running = sum(phase in ("prefill", "decode") for _, phase in record.all_seats)
        empty = sum(owner is not None and tokens == 0 for owner, tokens, _ in record.kv_blocks)
        titles.append(f"{name}: {running} running, {empty}/{len(record.kv_blocks)} blocks empty")
    path = out / "kv_contiguous_vs_paged.png"
    save_png("kv", list(traces.values()), str(path), step=KV_STEP, titles=titles)
    return path


def latency_png(out: Path) -> Path:
    runs = [run(LATENCY_WORK, batching=b, max_num_seqs=8)[0] for b in ("static", "continuous")]
    fig = latency_cdf(*runs, labels=["static, 8 seats", "continuous, 8 seats"], metric="e2e")
    fig.suptitle("64 requests with Bard-like output lengths, all arriving at once (simulated)", fontsize=9)
    path = out / "latency_static_vs_continuous.png"
    fig.savefig(path, dpi=100, metadata={"Software": None})   # no version stamp: the same bytes every run
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for make in (seats_gif, kv_png, latency_png):
        path = make(args.out)
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
