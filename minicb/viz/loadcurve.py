"""Latency against load: the same settings simulated at several arrival rates, and where the SLO breaks.

Below the knee, queues are short and p99 TTFT is a few steps; past it, arrivals outpace service, the queue
grows for the whole run and p99 TTFT climbs with it, while goodput stops rising and then falls.
plot_rate_sweep draws the same against a real server, from the benchmark client's sweep (lesson 09).
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from minicb.lab.hardware import HardwarePreset
from minicb.parts import EngineParts
from minicb.viz.figures import image_figure
from minicb.viz.playground import PlaygroundSettings, playground_run

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from minicb.serve.bench_client import BenchResult


def load_curve(settings: PlaygroundSettings, preset: HardwarePreset, rates: list[float],
               parts: EngineParts | None = None) -> list[dict]:
    """One point per arrival rate (req/s): p99 TTFT and ITL (s), goodput (req/s within the SLO), how many
    were served and rejected, and the SLO's targets, so that a point list plots on its own."""
    points = []
    for rate in sorted(rates):
        r = playground_run(dataclasses.replace(settings, rate=rate), preset, parts)
        points.append({"rate": rate, "ttft_p99_s": r.summary["ttft"]["p99"], "itl_p99_s": r.summary["itl"]["p99"],
                       "goodput_rps": r.goodput_rps, "served": r.summary["served"],
                       "rejected": r.summary["requests"] - r.summary["served"],
                       "slo_ttft_p99_s": settings.slo.ttft_p99_s, "slo_itl_p99_s": settings.slo.itl_p99_s})
    return points


def knee(points: list[dict]) -> float | None:
    """The lowest rate whose p99 TTFT exceeds the SLO's target; None if none does."""
    return next((p["rate"] for p in sorted(points, key=lambda p: p["rate"])
                 if p["ttft_p99_s"] > p["slo_ttft_p99_s"]), None)


def plot_load_curve(points: list[dict], title: str | None = None):
    """p99 TTFT and p99 ITL (log scale, with their targets dashed) and goodput (right axis) against the
    arrival rate, with the knee marked. A figure that Jupyter shows as a PNG."""
    points = sorted(points, key=lambda p: p["rate"])
    rates = [p["rate"] for p in points]
    fig = image_figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    for key, label, color in (("ttft_p99_s", "p99 TTFT", "#1f77b4"), ("itl_p99_s", "p99 ITL", "#ff7f0e")):
        ax.plot(rates, [p[key] for p in points], "o-", color=color, label=label)
        ax.axhline(points[0]["slo_" + key], color=color, linestyle="--", linewidth=1, label=f"{label} target")
    ax.set_yscale("log")
    ax.set_xlabel("arrival rate (req/s)")
    ax.set_ylabel("latency (s, log scale)")
    ax.grid(alpha=0.3, which="both")
    right = ax.twinx()
    right.plot(rates, [p["goodput_rps"] for p in points], "s-", color="#2ca02c", label="goodput")
    right.set_ylabel("goodput (req/s within the SLO)")
    right.set_ylim(bottom=0)
    at = knee(points)
    if at is not None:
        ax.axvline(at, color="#d62728", linewidth=1.5, label=f"knee: {at:g} req/s")
    lines, labels = ax.get_legend_handles_labels()
    more, more_labels = right.get_legend_handles_labels()
    # Below the axes: inside, it would hide the curves wherever they happen to run.
    fig.legend(lines + more, labels + more_labels, loc="outside lower center", ncols=3, fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def plot_rate_sweep(results: list[BenchResult]) -> Figure:
    """Latency against load: p50 and p99 TTFT and ITL, and request throughput and goodput, against the
    offered rate. A matplotlib Figure that Jupyter shows as a PNG and savefig writes without a display."""
    if any(r.config["rate"] is None for r in results):
        raise ValueError("a rate of inf (all at once) has no place on a rate axis; sweep finite rates to plot")
    results = sorted(results, key=lambda r: r.config["rate"])
    rates = [r.config["rate"] for r in results]
    fig = image_figure(figsize=(12, 3.8), layout="constrained")
    ttft, itl, rps = fig.subplots(1, 3)
    for ax, key, title in ((ttft, "ttft", "time to first token"), (itl, "itl", "inter-token latency")):
        for p, style in (("p50", "o-"), ("p99", "s--")):
            ax.plot(rates, [math.nan if r.summary[key][p] is None else r.summary[key][p] for r in results], style,
                    label=p)
        target = results[0].summary["slo"][f"{key}_s"]
        if target is not None:
            ax.axhline(target, color="gray", linewidth=1, linestyle=":", label="SLO")
        ax.set(title=title, xlabel="offered rate (req/s)", ylabel="seconds", yscale="log")
    rps.plot(rates, rates, ":", color="gray", label="offered")
    rps.plot(rates, [r.summary["request_throughput"] for r in results], "o-", label="completed")
    rps.plot(rates, [r.summary["goodput"] for r in results], "s-", label="goodput (within the SLO)")
    rps.set(title="throughput", xlabel="offered rate (req/s)", ylabel="requests per second")
    for ax in (ttft, itl, rps):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return fig
