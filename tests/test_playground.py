"""The playground, headless: set its controls from Python, read the figures it renders, and check them against
the simulator run directly; the load curve's shape and its picture."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest

import minicb.viz.playground as pg_module
from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.lab.hardware import PRESETS
from minicb.lab.workload import PROLOGUE, run_workload
from minicb.stats.goodput import SloTarget
from minicb.stats.metrics import summarize
from minicb.stats.trace import DECODE, PREFILL
from minicb.viz import Playground, PlaygroundSettings, knee, load_curve, playground_run, plot_load_curve, render_result
from minicb.viz.playground import FIGURES, playground_workload, render_seat_strip, serve

CPU = next(iter(PRESETS.values()))
SMALL = PlaygroundSettings(num_requests=100)   # about a second a run


def shown(html: str, run: str = "current") -> dict[str, float]:
    """metric -> the exact number a column of the rendered table carries (data-value)."""
    cells = re.findall(r'data-run="(\w+)" data-metric="(\w+)" data-value="([^"]*)"', html)
    return {metric: float(value) for r, metric, value in cells if r == run}


def direct_summary(settings: PlaygroundSettings) -> dict:
    """summarize() of the settings' workload on an engine built here, by hand, fcfs (no priorities)."""
    engine = LLMEngine(device="cpu", simulate=True, step_cost=CPU.step_cost, num_blocks=CPU.num_blocks,
                       block_size=CPU.block_size, max_num_seqs=settings.max_num_seqs,
                       max_num_batched_tokens=settings.max_num_batched_tokens,
                       enable_chunked_prefill=settings.enable_chunked_prefill, seed=settings.seed)
    requests, priorities = playground_workload(settings)
    assert set(priorities) == {0}
    return summarize(run_workload(engine, requests, progress=False), engine.trace)


@pytest.fixture(scope="module")
def widget():
    return Playground(num_requests=SMALL.num_requests)


def test_the_widget_shows_what_the_simulator_gives_and_redraws_on_a_change(widget):
    before = widget.html
    assert shown(before) == pytest.approx(widget.current.figures(), nan_ok=True)
    widget.controls["rate"].value = 35.0
    assert widget.settings.rate == 35.0 and widget.html != before
    expected = direct_summary(dataclasses.replace(SMALL, rate=35.0))
    figures = shown(widget.html)
    # The very same numbers: the widget runs the simulator, it does not estimate.
    assert figures["output_tok_per_s"] == expected["output_tok_per_s"]
    assert figures["requests_per_s"] == expected["requests_per_s"]
    assert figures["ttft_p99_s"] == expected["ttft"]["p99"]
    assert figures["itl_p50_s"] == expected["itl"]["p50"]
    assert figures["e2e_p99_s"] == expected["e2e"]["p99"]
    assert set(figures) == set(FIGURES)


def test_pin_keeps_a_run_beside_the_next(widget):
    widget.controls["enable_chunked_prefill"].value = False
    pinned = shown(widget.html)
    widget.pin()
    widget.controls["long_prefill_token_threshold"].value = 64   # greyed out, and unused, until chunking is on
    assert shown(widget.html) == pytest.approx(pinned, nan_ok=True)
    widget.controls["enable_chunked_prefill"].value = True
    html = widget.html
    assert shown(html, "pinned") == pytest.approx(pinned, nan_ok=True)
    assert shown(html, "current") == pytest.approx(widget.current.figures(), nan_ok=True)
    assert shown(html, "current")["itl_p99_s"] < pinned["itl_p99_s"], "chunking keeps long prefills off decodes"
    assert ">pinned</th>" in html and ">current</th>" in html and ">change</th>" in html
    assert "enable_chunked_prefill False → True" in html and "long_prefill_token_threshold 0 → 64" in html
    widget.unpin()
    assert not shown(widget.html, "pinned")
    widget.controls["enable_chunked_prefill"].value = False
    widget.controls["long_prefill_token_threshold"].value = 0


def test_the_controls_cover_every_setting_and_sliders_wait_for_release(widget):
    fixed = {"num_requests", "seed", "slo"}
    assert set(widget.controls) == {f.name for f in dataclasses.fields(PlaygroundSettings)} - fixed
    for name, control in widget.controls.items():
        if hasattr(control, "continuous_update"):
            assert control.continuous_update is False, f"{name} would re-run the simulator while dragged"


def test_an_engine_knob_has_engine_configs_name_and_reaches_it_unchanged(widget):
    workload_only = {"rate", "lengths", "long_prompt_fraction", "shared_prologue", "num_requests", "urgent_fraction",
                     "slo"}
    engine_knobs = {f.name for f in dataclasses.fields(EngineConfig)}
    names = {f.name for f in dataclasses.fields(PlaygroundSettings)}
    assert names - engine_knobs == workload_only, "a playground field names an engine knob by another name"
    chosen = dict(max_num_seqs=7, max_num_batched_tokens=320, num_blocks=123, block_size=8,
                  enable_chunked_prefill=True, long_prefill_token_threshold=48, schedule_priority="prefill_first",
                  scheduling_policy="priority", preemption_mode="swap", max_waiting=0, max_queue_delay_s=0.5,
                  enable_prefix_caching=True, seed=3)
    assert set(chosen) == names - workload_only
    config = pg_module.engine_config(dataclasses.replace(SMALL, **chosen), CPU)
    assert {name: getattr(config, name) for name in chosen} == chosen, "0 is a bound in EngineConfig, as here"
    widget.controls["max_waiting"].value = 0
    assert widget.settings.max_waiting is None, "the widget's box shows no bound as 0"

def test_another_preset_loads_its_pool_and_runs_once(monkeypatch):
    runs = []

    def counted(settings, preset, parts=None):
        runs.append(settings)
        return playground_run(settings, preset, parts)

    monkeypatch.setattr(pg_module, "playground_run", counted)
    small = dataclasses.replace(CPU, name="small pool", num_blocks=300)
    w = Playground(presets={CPU.name: CPU, small.name: small}, num_requests=40)
    runs.clear()
    w.preset.value = small.name
    assert len(runs) == 1, "one run for the new preset, not one per control it sets"
    assert w.controls["num_blocks"].value == 300 and w.current.num_blocks == 300
    assert "small pool" in w.html


def test_a_pool_too_small_for_any_request_shows_why_instead_of_failing():
    r = playground_run(dataclasses.replace(SMALL, num_requests=20, num_blocks=1, block_size=1), CPU)
    f = r.figures()
    assert f["served"] == 0 and f["rejected"] == 20 and f["goodput_rps"] == 0 and math.isnan(f["ttft_p99_s"])
    html = render_result(r, r)
    assert "20 rejected, for instance: this engine can never serve the request: it needs" in html and "less than one sequence" in html


def test_priority_serves_the_urgent_share_first():
    s = dataclasses.replace(SMALL, rate=80.0, scheduling_policy="priority", urgent_fraction=0.2)
    requests, priorities = playground_workload(s)
    assert priorities.count(0) == 20 and priorities.count(1) == 80
    engine = LLMEngine(pg_module.engine_config(s, CPU))
    outputs = serve(engine, requests, priorities)
    ttft = {p: sorted(o.metrics.ttft for o, q in zip(outputs, priorities) if q == p) for p in (0, 1)}
    assert ttft[0][len(ttft[0]) // 2] < ttft[1][len(ttft[1]) // 2]


def test_long_prompts_and_lengths_follow_the_settings():
    requests, _ = playground_workload(dataclasses.replace(SMALL, long_prompt_fraction=0.3, lengths="fixed"))
    long = [r for r in requests if isinstance(r.prompt, list)]
    assert len(long) == 30 and all(300 <= len(r.prompt) <= 600 for r in long)
    assert {r.params.max_tokens for r in requests} == {32}
    times = [r.arrival_time for r in requests]
    assert times == sorted(times)


def test_a_shared_prologue_with_prefix_caching_hits_as_the_engine_counts_it(widget):
    widget.controls["shared_prologue"].value = True
    requests, _ = playground_workload(widget.settings)
    speakers = [r for r in requests if isinstance(r.prompt, str)]
    assert speakers and all(r.prompt.startswith(PROLOGUE) for r in speakers), "every speaker line after the Prologue"
    assert shown(widget.html)["prefix_hit_pct"] == 0, "caching is off until its box is ticked"
    widget.controls["enable_prefix_caching"].value = True
    engine = LLMEngine(pg_module.engine_config(widget.settings, CPU))
    assert engine.config.enable_prefix_caching
    outputs = serve(engine, requests, [0] * len(requests))
    cached = sum(o.num_cached_tokens for o in outputs) / sum(len(o.prompt_token_ids) for o in outputs)
    assert shown(widget.html)["prefix_hit_pct"] == pytest.approx(100 * cached) and cached > 0.5
    widget.controls["shared_prologue"].value = widget.controls["enable_prefix_caching"].value = False


def test_seat_strip_counts_every_busy_seat_step():
    r = playground_run(dataclasses.replace(SMALL, num_requests=20, max_num_seqs=8), CPU)
    trace = r.trace
    # One row per seat and one column per step: each cell is one seat in one step, fully busy or empty.
    html = render_seat_strip(trace, columns=len(trace.steps), rows=trace.num_seats)
    paths = re.findall(r'data-phase="(\w+)" data-opacity="([\d.]+)" data-cells="(\d+)"', html)
    assert {opacity for _, opacity, _ in paths} == {"1.0"}
    for phase in (PREFILL, DECODE):
        drawn = sum(int(n) for p, _, n in paths if p == phase)
        assert drawn == sum(ph == phase for s in trace.steps for _, ph in s.seats.values())
    # Shrunk, it still shows every column and says how much of the batch worked.
    small = render_seat_strip(trace, columns=10, rows=4)
    assert f"seats doing work {100 * trace.seat_utilization:.0f}%" in small
    assert len(small) < len(html)


def test_load_curve_has_a_knee_past_which_ttft_climbs():
    rates = [20.0, 60.0, 120.0, 240.0]
    points = load_curve(dataclasses.replace(SMALL, slo=SloTarget(ttft_p99_s=0.5)), CPU, rates)
    assert [p["rate"] for p in points] == rates
    at = knee(points)
    assert at is not None and at > rates[0], "light load meets the TTFT target; heavy load does not"
    past = [p["ttft_p99_s"] for p in points if p["rate"] >= at]
    assert all(b >= 0.9 * a for a, b in zip(past, past[1:])), f"p99 TTFT past the knee: {past}"
    assert points[-1]["ttft_p99_s"] > 2 * points[0]["ttft_p99_s"]


def test_knee_is_the_first_rate_over_the_target():
    def point(rate: float, ttft: float) -> dict:
        return {"rate": rate, "ttft_p99_s": ttft, "slo_ttft_p99_s": 1.0}

    assert knee([point(30, 2.0), point(10, 0.1), point(20, 1.5)]) == 20
    assert knee([point(10, 0.1)]) is None


def test_the_load_curve_figure_shows_as_a_png():
    from IPython.core.formatters import DisplayFormatter

    points = [{"rate": r, "ttft_p99_s": t, "itl_p99_s": 0.02, "goodput_rps": g, "slo_ttft_p99_s": 1.0,
               "slo_itl_p99_s": 0.05} for r, t, g in ((10, 0.1, 9.0), (20, 0.4, 18.0), (40, 3.0, 12.0))]
    fig = plot_load_curve(points)
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"].startswith(b"\x89PNG"), "Jupyter would print '<Figure size ...>' instead"
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert any(line.get_label() == "knee: 40 req/s" for line in ax.get_lines())
