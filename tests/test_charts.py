"""The lessons' charts (minicb.viz.charts) draw exactly the numbers a lesson cell hands them."""
from __future__ import annotations

import numpy as np
import pytest
from IPython.core.formatters import DisplayFormatter

from minicb.costs import PreemptionCost
from minicb.engine import LLMEngine
from minicb.sampling import SamplingParams
from minicb.viz.charts import (QUEUE_COLORS, plot_causal_tiles, plot_gains, plot_hit_rate_by_pool, plot_ms_per_step,
                               plot_pool_occupancy, plot_preemption_costs, plot_queue_lengths, plot_static_sweep,
                               plot_step_costs, plot_tradeoff, plot_utilization_bars)


@pytest.fixture(scope="module")
def trace():
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=4, num_blocks=32)
    for k in (3, 9, 5, 12, 4):
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=k, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    return engine.trace


def ydata(ax) -> list[list[float]]:
    return [list(line.get_ydata()) for line in ax.get_lines()]


def test_the_static_sweep_draws_utilization_and_throughput_per_length_kind():
    sizes = [1, 4, 16]
    sweep = {"fixed": [{"seat_utilization": 1.0, "output_tok_per_s": t} for t in (10, 40, 160)],
             "heavy": [{"seat_utilization": u, "output_tok_per_s": 5} for u in (1.0, 0.4, 0.1)]}
    utilization, throughput = plot_static_sweep(sizes, sweep).axes
    assert ydata(utilization) == [[1.0, 1.0, 1.0], [1.0, 0.4, 0.1]]
    assert ydata(throughput) == [[10, 40, 160], [5, 5, 5]]
    assert [t.get_text() for t in utilization.get_legend().get_texts()] == ["fixed lengths", "heavy lengths"]


def test_bars_have_the_heights_they_are_given_in_order():
    (ax,) = plot_utilization_bars([("top", {"seat_utilization": 0.9}), ("bottom", {"seat_utilization": 0.2})],
                                  xlabel="x", title="t").axes
    assert [bar.get_width() for bar in ax.patches] == [0.2, 0.9]   # barh draws upwards: the first row on top
    (ax,) = plot_gains(["a", "b", "c"], {"steps": [2.0, 1.5, 1.0], "tok/s": [1.2, 1.1, 0.9]}, title="t").axes
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == [2.0, 1.5, 1.0, 1.2, 1.1, 0.9]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]


def test_lines_carry_the_values_and_the_hit_rate_is_in_percent():
    (ax,) = plot_ms_per_step([1, 2, 4], {"flat": [1.0, 1.1, 1.3], "loop": [1.0, 2.0, 4.0]}, xlabel="x", title="t").axes
    assert ydata(ax) == [[1.0, 1.1, 1.3], [1.0, 2.0, 4.0]]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    (ax,) = plot_hit_rate_by_pool([32, 64], [0.25, 0.5], title="t").axes
    assert ydata(ax) == [[25.0, 50.0]]


def test_the_pool_chart_draws_each_step_of_each_trace_under_the_pool_line(trace):
    axes = plot_pool_occupancy({"one": trace, "two": trace}, pool_slots=512).axes
    assert len(axes) == 2
    for ax in axes:
        assert ydata(ax) == [[512, 512]]                       # the pool's dashed line
        reserved, holding = ax.collections
        top = [max(path.vertices[:, 1]) for path in reserved.get_paths()]
        assert max(top) == max(s.reserved_slots for s in trace.steps)
        assert max(max(p.vertices[:, 1]) for p in holding.get_paths()) == max(s.token_slots for s in trace.steps)


def test_the_step_costs_scatter_each_step_and_plot_the_reply_gaps(trace):
    cost, stream = plot_step_costs(trace.steps, [0.01, 0.02, 0.015]).axes
    points = cost.collections[0].get_offsets()
    assert [tuple(p) for p in points] == [(s.num_tokens, s.duration * 1e3) for s in trace.steps]
    assert ydata(stream) == [[10.0, 20.0, 15.0]]


def test_each_queue_is_a_line_in_its_colour_and_each_run_a_panel():
    queues = {"swap": {"waiting": [3, 2, 0], "running": [1, 2, 2], "swapped": [0, 1, 0]},
              "recompute": {"waiting": [3, 1, 0], "running": [1, 2, 1]}}
    swap, recompute = plot_queue_lengths(queues, titles={"swap": "three queues"}).axes
    assert ydata(swap) == [[3, 2, 0], [1, 2, 2], [0, 1, 0]] and ydata(recompute) == [[3, 1, 0], [1, 2, 1]]
    assert [line.get_color() for line in swap.get_lines()] == [QUEUE_COLORS[q] for q in queues["swap"]]
    assert swap.get_title() == "three queues" and recompute.get_title() == "recompute"   # untitled: its name


def test_the_cost_chart_prices_every_context_with_each_model():
    recompute = PreemptionCost(recompute_fixed=1e-3, recompute_per_token=1e-4, recompute_per_token_sq=0.0,
                               swap_fixed=0.0, swap_per_token=0.0)
    swap = PreemptionCost(recompute_fixed=0.0, recompute_per_token=0.0, recompute_per_token_sq=0.0,
                          swap_fixed=3e-3, swap_per_token=2e-5)
    contexts = [0, 100, 200]
    (ax,) = plot_preemption_costs(contexts, recompute, {"link": swap}, xlabel="x", title="t").axes
    assert ydata(ax) == [[recompute.recompute_s(t) * 1e3 for t in contexts], [swap.swap_s(t) * 1e3 for t in contexts]]


def test_the_tradeoff_labels_every_point():
    points = [("4 seats", 100.0, 1.0), ("8 seats", 180.0, 1.5), ("16 seats", 200.0, 3.0)]
    (ax,) = plot_tradeoff(points, xlabel="x", ylabel="y", title="t").axes
    assert ydata(ax) == [[1.0, 1.5, 3.0]]
    assert [(t.get_text(), t.xy) for t in ax.texts] == [(label, (x, y)) for label, x, y in points]


def test_the_tile_map_shows_each_kind_and_names_each_tiles_positions():
    kinds = np.array([[2, 1, 0, 0], [2, 2, 1, 0], [2, 2, 2, 1]])
    (ax,) = plot_causal_tiles(kinds, prefix=24, q_len=40, tile=16).axes
    assert (ax.images[0].get_array() == kinds).all()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["new 0-15", "new 16-31", "new 32-39"]
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "keys\n48-63"


def test_a_chart_shows_as_a_picture_in_jupyter():
    data, _ = DisplayFormatter().format(plot_hit_rate_by_pool([32, 64], [0.25, 0.5], title="t"))
    assert data["image/png"].startswith(b"\x89PNG")
