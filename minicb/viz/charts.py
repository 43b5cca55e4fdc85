"""The lessons' charts: each draws numbers a lesson cell measured, so that the cell shows the measuring
and one call draws it. Every function returns a figure that Jupyter shows as a PNG (minicb.viz.figures),
and keeps no pyplot state.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from minicb.viz.figures import image_figure

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure

    from minicb.costs import PreemptionCost
    from minicb.stats.trace import StepRecord, Trace

QUEUE_COLORS = {"waiting": "tab:grey", "running": "tab:blue", "swapped": "tab:orange"}
# The three kinds of tile in causal_tiles, in the colormap's order.
TILE_COLORS = ("#e6e6e6", "#ffbf80", "#1f77b4")


def plot_static_sweep(sizes: Sequence[int], sweep: Mapping[str, Sequence[Mapping]]) -> Figure:
    """Seat utilization and output tok/s against the batch size, one line per length distribution.
    sweep[kind][i] is the summary (minicb.stats.metrics.summarize) of the run with sizes[i] seats."""
    fig = image_figure(figsize=(10, 3.2), layout="constrained")
    utilization, throughput = fig.subplots(1, 2)
    for kind, summaries in sweep.items():
        style = "o--" if kind == "fixed" else "o-"
        utilization.plot(sizes, [s["seat_utilization"] for s in summaries], style, label=f"{kind} lengths")
        throughput.plot(sizes, [s["output_tok_per_s"] for s in summaries], style, label=f"{kind} lengths")
    utilization.set(ylabel="seat utilization", ylim=(0, 1.05), title="Static batching: utilization")
    throughput.set(ylabel="output tokens / s (simulated)", title="...and throughput")
    for ax in (utilization, throughput):
        ax.set(xscale="log", xlabel="batch size (seats)")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.legend()
    return fig


def plot_utilization_bars(rows: Sequence[tuple[str, Mapping]], xlabel: str, title: str) -> Figure:
    """One horizontal bar per (label, summary), its seat utilization, the first row on top."""
    fig = image_figure(figsize=(6, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.barh([label for label, _ in rows][::-1], [s["seat_utilization"] for _, s in rows][::-1])
    ax.set(xlabel=xlabel, xlim=(0, 1), title=title)
    return fig


def plot_gains(labels: Sequence[str], gains: Mapping[str, Sequence[float]], title: str) -> Figure:
    """Side-by-side bars of one ratio per case, one bar per way of measuring it (gains[way][case]),
    against a grey line at 1 (no gain)."""
    fig = image_figure(figsize=(7, 3), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(gains)
    for k, (way, values) in enumerate(gains.items()):
        offset = (k - (len(gains) - 1) / 2) * width
        ax.bar([i + offset for i in range(len(labels))], values, width, label=way)
    ax.axhline(1, color="grey", lw=1)
    ax.set_xticks(range(len(labels)), labels, rotation=20)
    ax.set(ylabel="continuous / static", title=title)
    ax.legend()
    return fig


def plot_ms_per_step(sizes: Sequence[int], ms: Mapping[str, Sequence[float]], xlabel: str, title: str) -> Figure:
    """Milliseconds per step against the batch size, one line per way of running it, log-log."""
    fig = image_figure(figsize=(6, 3.2), layout="constrained")
    ax = fig.add_subplot()
    for (name, values), style in zip(ms.items(), ("o-", "s-", "^-", "v-")):
        ax.plot(sizes, values, style, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set(xlabel=xlabel, ylabel="ms per step", title=title)
    ax.legend()
    return fig


def plot_pool_occupancy(traces: Mapping[str, Trace], pool_slots: int) -> Figure:
    """Per step, the KV slots handed out (reserved) and the ones holding a token, one panel per run,
    against the pool's size."""
    fig = image_figure(figsize=(11, 3.2), layout="constrained")
    axes = fig.subplots(1, len(traces), sharey=True, squeeze=False)[0]
    for ax, (name, trace) in zip(axes, traces.items()):
        steps = range(len(trace.steps))
        ax.fill_between(steps, [s.reserved_slots for s in trace.steps], step="post", alpha=0.3, label="reserved")
        ax.fill_between(steps, [s.token_slots for s in trace.steps], step="post", alpha=0.8, label="holding tokens")
        ax.axhline(pool_slots, color="grey", lw=1, ls="--", label="pool")
        ax.set(title=name, xlabel="step")
        ax.legend(loc="upper right")
    axes[0].set_ylabel("KV token slots")
    return fig


def plot_causal_tiles(kinds: np.ndarray, prefix: int, q_len: int, tile: int) -> Figure:
    """The (query tile, key tile) grid of one sequence's causal prefill of q_len new tokens after `prefix`
    cached ones: kinds[q, k] is 0 for a tile never visited, 1 for one on the diagonal (masked in part), 2
    for a full one. The cached keys lie left of the dashed line."""
    from matplotlib.colors import ListedColormap

    seq_len = prefix + q_len
    q_tiles, k_tiles = kinds.shape
    fig = image_figure(figsize=(6, 3.2), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(kinds, cmap=ListedColormap(TILE_COLORS), vmin=0, vmax=2)
    ax.set_xticks(range(k_tiles), [f"keys\n{k * tile}-{min((k + 1) * tile, seq_len) - 1}" for k in range(k_tiles)])
    ax.set_yticks(range(q_tiles), [f"new {q * tile}-{min((q + 1) * tile, q_len) - 1}" for q in range(q_tiles)])
    ax.axvline(prefix / tile - 0.5, color="k", lw=1, ls="--")
    ax.set_title(f"one sequence: {prefix} cached + {q_len} new tokens, {tile}x{tile} tiles\n"
                 "blue: full, orange: masked in part, grey: skipped")
    return fig


def plot_queue_lengths(queues: Mapping[str, Mapping[str, Sequence[int]]], titles: Mapping[str, str]) -> Figure:
    """Each queue's length per step, one panel per run: queues[run][queue] is the length at every step."""
    fig = image_figure(figsize=(11, 3), layout="constrained")
    axes = fig.subplots(1, len(queues), sharey=True, squeeze=False)[0]
    for ax, (run, lengths) in zip(axes, queues.items()):
        for name, per_step in lengths.items():
            ax.plot(per_step, label=name, color=QUEUE_COLORS.get(name), lw=1.2)
        ax.set(xlabel="step (simulated)", title=titles.get(run, run))
        ax.legend(fontsize=8)
    axes[0].set_ylabel("requests in the queue")
    return fig


def plot_preemption_costs(contexts: Sequence[int], recompute: PreemptionCost, swaps: Mapping[str, PreemptionCost],
                          xlabel: str, title: str) -> Figure:
    """What one preemption costs against the victim's context: recompute's prefill again, and a swap's
    copies out and in under each named cost model."""
    fig = image_figure(figsize=(6, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(contexts, [recompute.recompute_s(t) * 1e3 for t in contexts], label="recompute (prefill again)")
    for name, cost in swaps.items():
        ax.plot(contexts, [cost.swap_s(t) * 1e3 for t in contexts], label=f"swap out and in, {name}")
    ax.set(xlabel=xlabel, ylabel="ms", title=title)
    ax.legend()
    return fig


def plot_tradeoff(points: Sequence[tuple[str, float, float]], xlabel: str, ylabel: str, title: str) -> Figure:
    """One line through (x, y) points, each labelled: (label, x, y). Labels alternate below and above the
    line, so that neighbours on a steep stretch do not print over each other, and a point left of the one
    before it (where the line turns back) is labelled above on its left."""
    fig = image_figure(figsize=(6, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([x for _, x, _ in points], [y for _, _, y in points], "o-")
    for i, (label, x, y) in enumerate(points):
        turns_back = i > 0 and x < points[i - 1][1]
        offset = (-8, 6) if turns_back else (8, -12 if i % 2 == 0 else 6)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=offset, ha="right" if turns_back else "left",
                    fontsize=8)
    ax.margins(x=0.12, y=0.2)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    return fig


def plot_step_costs(steps: Sequence[StepRecord], gaps: Sequence[float]) -> Figure:
    """Left, each step's duration against its token count; right, the gaps between one reply's tokens."""
    fig = image_figure(figsize=(11, 3), layout="constrained")
    cost, stream = fig.subplots(1, 2)
    cost.scatter([s.num_tokens for s in steps], [s.duration * 1e3 for s in steps], s=4)
    cost.set(xlabel="tokens in the step", ylabel="step time (ms, simulated)", title="a step costs its tokens")
    stream.plot([g * 1e3 for g in gaps], lw=1)
    stream.set(xlabel="token of one reply", ylabel="gap before it (ms)", title="the stream one user sees")
    return fig


def plot_hit_rate_by_pool(pools: Sequence[int], hit_rates: Sequence[float], title: str) -> Figure:
    """The prefix cache's hit rate (a share) against the pool's size in blocks, log2 axis."""
    fig = image_figure(figsize=(5.5, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(pools, [100 * h for h in hit_rates], "o-")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="KV pool (blocks)", ylabel="prefix-cache hit rate (%)", title=title)
    ax.grid(alpha=0.3)
    return fig


def plot_decode_batching(step_seconds: dict[str, dict[int, float]], title: str | None = None) -> Figure:
    """Decode steps against batch size, one line per model (lesson 00): a step that waits on its weight reads
    costs about the same at any batch size, so its tokens per second grow with the batch; once the arithmetic
    is the wait, its time grows too. step_seconds: model -> {sequences in the step: seconds the decode step
    took}. Left, each step's
    milliseconds; right, the tokens per second it yields (sequences / seconds); both log-log, against the
    sequences per step. A figure that Jupyter shows as a PNG."""
    if not step_seconds or any(not steps for steps in step_seconds.values()):
        raise ValueError("plot_decode_batching needs at least one model, each with at least one timed step")
    fig = image_figure(figsize=(9, 3.2), layout="constrained")
    step_ax, rate_ax = fig.subplots(1, 2)
    batches = sorted({n for steps in step_seconds.values() for n in steps})
    for model, steps in step_seconds.items():
        sizes = sorted(steps)
        step_ax.plot(sizes, [steps[n] * 1e3 for n in sizes], "o-", label=model)
        rate_ax.plot(sizes, [n / steps[n] for n in sizes], "o-", label=model)
    step_ax.set(ylabel="decode step (ms)", title="time per step")
    rate_ax.set(ylabel="tokens per second", title="tokens per second")
    for ax in (step_ax, rate_ax):
        ax.set(xscale="log", yscale="log", xlabel="sequences per decode step")
        ax.set_xticks(batches, [str(n) for n in batches])
        ax.minorticks_off()
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
