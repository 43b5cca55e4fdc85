"""Decode steps against batch size, one line per model (lesson 00): what a step costs, and what it yields.

A step that waits on its weight reads costs about the same at any batch size, so its tokens per second grow with
the batch; once the arithmetic is the wait, its time grows with the batch too and tokens per second flatten.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from minicb.viz.figures import image_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_decode_batching(step_seconds: dict[str, dict[int, float]], title: str | None = None) -> Figure:
    """step_seconds: model -> {sequences in the step: seconds the decode step took}. Left, each step's
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
