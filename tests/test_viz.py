"""The widgets, headless: drive the slider from Python and check the rendered SVG against the trace itself."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.sampling import SamplingParams
from minicb.stats.trace import DECODE, IDLE, PAD, PREFILL
from minicb.viz import (KVBlockMap, SeatOccupancy, Timeline, latency_cdf, render_kv_blocks, render_seats,
                        render_timeline, save_gif, save_html, save_png, timeline_still)
from minicb.viz.draw import PALETTE, rgb
from minicb.viz.export import frame_steps

LENGTHS = (3, 9, 5, 12, 4, 7, 20, 6)   # the 20 spills into a second KV block


def run(lengths=LENGTHS, num_blocks=64, **config):
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=4, num_blocks=num_blocks, **config)
    for k in lengths:
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=k, ignore_eos=True))
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.finished]
    return engine.trace, outputs


@pytest.fixture(scope="module")
def static():
    return run(batching="static", trace_kv_blocks=True)[0]


@pytest.fixture(scope="module")
def continuous():
    return run(trace_kv_blocks=True)[0]


@pytest.fixture(scope="module")
def contiguous():
    return run(kv_reservation="contiguous", max_model_len=64, trace_kv_blocks=True)[0]


@pytest.fixture(scope="module")
def preempting():
    trace = run((20, 20, 20), num_blocks=3)[0]
    assert any(s.preempted for s in trace.steps)   # the setup these tests rely on
    return trace


def elements(html: str, **match: str) -> list[dict[str, str]]:
    """Attributes of each SVG element carrying data-* attributes, keeping those whose data-KEY equals VALUE."""
    found = []
    for tag in re.findall(r"<(?:rect|path|line)\b[^>]*>", html):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        if any(k.startswith("data-") for k in attrs) and all(attrs.get(f"data-{k}") == v for k, v in match.items()):
            found.append(attrs)
    return found


def counters_text(html: str) -> str:
    return re.search(r'class="minicb-counters"[^>]*>([^<]*)<', html).group(1)


def test_seat_grid_draws_each_seat_up_to_the_step_as_the_trace_says(static):
    for k in (0, 5, len(static.steps) - 1):
        cells = elements(render_seats(static, k))
        assert len(cells) == (k + 1) * static.num_seats
        assert max(int(c["data-step"]) for c in cells) == k
        for c in cells:
            rid, phase = static.steps[int(c["data-step"])].all_seats[int(c["data-seat"])]
            assert (c["data-request"], c["data-phase"]) == (rid or "", phase)


def decode_colors(html: str) -> dict[str, set[str]]:
    fills: dict[str, set[str]] = {}
    for c in elements(html, phase=DECODE):
        fills.setdefault(c["data-request"], set()).add(c["fill"])
    return fills


def test_a_request_keeps_one_colour_and_prefill_is_darker(continuous):
    html = render_seats(continuous, len(continuous.steps) - 1)
    fills = decode_colors(html)
    assert len(fills) == len(LENGTHS) and all(len(f) == 1 for f in fills.values())
    first = [fills[str(i)].copy().pop() for i in range(len(PALETTE))[:len(LENGTHS)]]
    assert len(set(first)) == len(first)          # distinct while the palette lasts
    prefills = elements(html, phase=PREFILL)
    assert prefills
    for c in prefills:
        decode = next(iter(fills[c["data-request"]]))
        assert c["fill"] != decode and sum(rgb(c["fill"])) < sum(rgb(decode))


def test_idle_seats_are_hatched_and_padding_cross_hatched(static):
    html = render_seats(static, len(static.steps) - 1)
    idle = elements(html, phase=IDLE)
    assert idle, "static batching leaves finished requests holding seats"
    for c in idle:
        decode = elements(html, phase=DECODE, request=c["data-request"])[0]["fill"]
        assert c["fill"] == f"url(#minicb-hatch-{decode[1:]})"
        assert f'<pattern id="minicb-hatch-{decode[1:]}"' in html
    padded = run(LENGTHS[:4], batching="padded")[0]
    pads = elements(render_seats(padded, len(padded.steps) - 1), phase=PAD)
    assert pads and all(c["fill"].startswith("url(#minicb-cross-") for c in pads)


def test_counters_match_the_trace_at_every_step(static):
    seen = set()
    for k, record in enumerate(static.steps):
        played = static.steps[:k + 1]
        phases = [phase for r in played for _, phase in r.all_seats]
        useful = sum(phase in (PREFILL, DECODE) for phase in phases)
        finished = sum(len(r.finished) for r in played)
        expected = (f"step {k + 1}/{len(static.steps)} · utilization so far {100 * useful / len(phases):.0f}% · "
                    f"finished {finished} · waiting {record.waiting}")
        text = counters_text(render_seats(static, k))
        assert text == expected
        seen.add(text)
    assert len(seen) == len(static.steps)
    assert "finished 8" in text and "waiting 0" in text


def test_rendering_is_deterministic(static):
    again = run(batching="static", trace_kv_blocks=True)[0]
    assert render_seats(static, 7) == render_seats(again, 7)
    assert render_kv_blocks(static, 7) == render_kv_blocks(again, 7)


def test_widget_renders_from_the_slider_in_python(static):
    w = SeatOccupancy(static)
    last = len(static.steps) - 1
    assert w.step == last and w.slider.max == last          # a static notebook shows the whole run
    assert w.html == [render_seats(static, last)]
    w.step = 2
    assert w.html == [render_seats(static, 2)]
    assert counters_text(w.html[0]).startswith(f"step 3/{last + 1}")


def test_play_at_the_end_starts_the_run_over(static):
    w = SeatOccupancy(static)
    w.play.playing = True
    assert w.step == 0


def test_two_runs_side_by_side_and_the_shorter_holds_its_last_step(static, continuous):
    w = SeatOccupancy(static, continuous, titles=["static", "continuous"])
    assert len(static.steps) > len(continuous.steps)
    assert len(w.html) == 2 and len(w.widget.children[1].children) == 2
    assert "static" in w.html[0] and "continuous" in w.html[1]
    w.step = len(static.steps) - 1
    n = len(continuous.steps)
    assert counters_text(w.html[1]).startswith(f"step {n}/{n}")
    with pytest.raises(ValueError):
        SeatOccupancy(static, continuous, titles=["only one"])


def kv_counts(record) -> dict[str, int]:
    counts = {"free": 0, "reserved": 0, "used": 0}
    for owner, tokens, _ in record.kv_blocks:
        counts["free" if owner is None else "used" if tokens else "reserved"] += 1
    return counts


def test_kv_map_states_match_the_block_map(continuous, contiguous):
    for trace in (continuous, contiguous):
        for k in range(len(trace.steps)):
            html = render_kv_blocks(trace, k)
            expected = kv_counts(trace.steps[k])
            assert {s: len(elements(html, state=s)) for s in expected} == expected
            assert counters_text(html) == (f"step {k + 1}/{len(trace.steps)} · used {expected['used']} · "
                                           f"reserved-empty {expected['reserved']} · free {expected['free']} blocks")
            for block in elements(html, state="used"):
                assert trace.steps[k].kv_blocks[int(block["data-block"])][0] == block["data-owner"]


def test_kv_map_shows_shared_and_cached_blocks_as_the_pool_holds_them():
    """With prefix caching, each step's map is checked against the block manager itself: a block in
    several tables is "shared", a cached block no table holds is "cached", and the caption counts both."""
    engine = LLMEngine(device="cpu", simulate=True, enable_prefix_caching=True, trace_kv_blocks=True, num_blocks=48,
                       max_num_seqs=6, max_model_len=700)
    prefix = list(range(100, 150))   # three full blocks that every request shares
    for i in range(10):
        engine.add_request(prefix + [200 + i, 300 + i], SamplingParams(max_tokens=20 + 7 * i, ignore_eos=True),
                           arrival_time=0.05 * i)
    seen = set()
    while engine.has_unfinished_requests():
        engine.step()
        kv, k = engine.scheduler.kv, len(engine.trace.steps) - 1
        html = render_kv_blocks(engine.trace, k)
        shared = {int(b["data-block"]) for b in elements(html, state="shared")}
        cached = {int(b["data-block"]) for b in elements(html, state="cached")}
        assert shared == {b for b in range(kv.num_blocks) if kv.ref_counts[b] > 1}, f"step {k}: shared blocks"
        assert cached == set(kv.evictable), f"step {k}: cached blocks that no table holds"
        for state, blocks in (("shared", shared), ("cached", cached)):
            if blocks:
                assert f"{state} {len(blocks)}" in counters_text(html), f"step {k}: the caption counts {state}"
                seen.add(state)
    assert seen == {"shared", "cached"}, "the run shows both states"


def test_contiguous_reservation_shows_reserved_empty_blocks_and_paged_does_not(continuous, contiguous):
    def reserved(trace):
        return [len(elements(render_kv_blocks(trace, k), state="reserved")) for k in range(len(trace.steps))]

    assert max(reserved(contiguous)) >= 8
    assert sum(reserved(continuous)) <= len(continuous.steps) // 4


def test_a_request_has_the_same_colour_in_both_views(continuous):
    fills = decode_colors(render_seats(continuous, len(continuous.steps) - 1))
    full = [b for k in range(len(continuous.steps))
            for b in elements(render_kv_blocks(continuous, k), state="used", tokens=str(EngineConfig().block_size))]
    assert full
    for block in full:
        assert {block["fill"]} == fills[block["data-owner"]]


def test_kv_map_needs_the_block_trace():
    trace = run(LENGTHS[:2])[0]
    with pytest.raises(ValueError, match="trace_kv_blocks=True"):
        render_kv_blocks(trace, 0)
    with pytest.raises(ValueError, match="trace_kv_blocks=True"):
        KVBlockMap(trace)


def test_kv_widget_follows_the_slider(contiguous):
    w = KVBlockMap(contiguous, columns=16)
    w.step = 4
    assert w.html == [render_kv_blocks(contiguous, 4, columns=16)]
    assert max(int(b["x"]) for b in elements(w.html[0])) < 16 * 16 + 4


def test_timeline_has_a_row_per_request_and_a_marker_per_result(continuous):
    html = render_timeline(continuous)
    rows = re.findall(r'class="minicb-row" data-request="([^"]*)"', html)
    assert rows == [str(i) for i in range(len(LENGTHS))]
    finished = [rid for r in continuous.steps for rid in r.finished]
    assert sorted(m["data-request"] for m in elements(html, phase="finished")) == sorted(finished)
    for rid in rows:   # prefill begins in the step that admitted the request; it queued before that
        admitted = next(r.step for r in continuous.steps if rid in r.admitted)
        assert int(elements(html, request=rid, phase=PREFILL)[0]["data-step"]) == admitted
        assert bool(elements(html, request=rid, phase="queued")) == (admitted > 0)
    early = render_timeline(continuous, 0)
    assert not elements(early, phase="finished")
    assert {e.get("data-step") for e in elements(early)} == {"0"}


def test_the_timeline_still_draws_a_row_per_request_and_a_tick_per_preemption(preempting):
    fig = timeline_still(preempting, title="t")
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(rows) == sorted({r for s in preempting.steps for r in [*s.tokens, *s.preempted]})
    red = [c for c in ax.collections if tuple(c.get_edgecolor()[0][:3]) == (1.0, 0.0, 0.0)]
    assert sum(len(c.get_segments()) for c in red) == sum(len(s.preempted) for s in preempting.steps)
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_timeline_marks_preemptions(preempting):
    html = render_timeline(preempting)
    expected = sorted(rid for r in preempting.steps for rid in r.preempted)
    assert sorted(m["data-request"] for m in elements(html, phase="preempted")) == expected
    w = Timeline(preempting)
    w.step = 3
    assert w.html == [render_timeline(preempting, 3)]


def test_save_html_holds_every_frame_and_no_urls(tmp_path, static, continuous):
    path = tmp_path / "seats.html"
    save_html(render_seats, [static, continuous], str(path), titles=["static", "continuous"])
    page = path.read_text()
    assert "http" not in page and "src=" not in page
    frames = json.loads(re.search(r"const frames = (\[.*\]);", page).group(1))
    assert len(frames) == len(static.steps)
    for k, frame in enumerate(frames):
        assert f"step {k + 1}/{len(static.steps)}" in frame
        assert frame.count('class="minicb-seats"') == 2
    SeatOccupancy(static).save_html(str(tmp_path / "w.html"))
    assert (tmp_path / "w.html").read_text().count("minicb-counters") == len(static.steps)


def test_frame_steps_are_bounded_and_end_on_the_last_step():
    assert frame_steps(10) == list(range(10))
    assert frame_steps(10, every=4) == [0, 4, 8, 9]
    long = frame_steps(1000)
    assert len(long) <= 120 and long[0] == 0 and long[-1] == 999


def test_save_gif_animates_and_save_png_draws_the_colours(tmp_path, static, continuous, contiguous):
    path = tmp_path / "seats.gif"
    save_gif("seats", [static, continuous], str(path), every=4, titles=["static", "continuous"])
    with Image.open(path) as gif:
        assert gif.n_frames == len(frame_steps(len(static.steps), 4)) > 1
        assert 300 <= gif.width <= 1200
    KVBlockMap(contiguous).save_gif(str(tmp_path / "kv.gif"), every=6)
    with Image.open(tmp_path / "kv.gif") as gif:
        assert gif.n_frames > 1
    save_png("kv", contiguous, str(tmp_path / "kv.png"), step=1)   # request 0 still holds blocks
    with Image.open(tmp_path / "kv.png") as png:
        assert rgb(PALETTE[0]) in set(png.convert("RGB").getdata())
    with pytest.raises(TypeError):
        Timeline(static).save_gif(str(tmp_path / "t.gif"))
    with pytest.raises(ValueError):
        save_gif("gantt", static, str(tmp_path / "x.gif"))


def test_latency_cdf_draws_one_curve_per_run():
    _, static_out = run(batching="static")
    _, continuous_out = run()
    fig = latency_cdf(static_out, continuous_out, labels=["static", "continuous"], metric="ttft")
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2
    for line, outputs in zip(lines, (static_out, continuous_out)):
        assert line.get_ydata()[-1] == 1
        assert list(line.get_xdata()[1:]) == sorted(o.metrics.ttft for o in outputs)
    with pytest.raises(ValueError):
        latency_cdf(static_out, metric="p99")


def test_a_figure_shows_as_a_picture_in_jupyter():
    """What Jupyter displays for the returned figure: a PNG, not "<Figure size ... with 1 Axes>"."""
    from IPython.core.formatters import DisplayFormatter

    _, outputs = run()
    data, _ = DisplayFormatter().format(latency_cdf(outputs))
    assert data["image/png"].startswith(b"\x89PNG"), "the figure has no PNG for Jupyter to show"


def test_a_widget_says_in_words_what_it_is_where_it_cannot_be_drawn(static, continuous):
    """A saved notebook shows a widget's text form until its kernel runs: a sentence, not the box's repr."""
    from IPython.core.formatters import DisplayFormatter

    for widget in (SeatOccupancy(static), Timeline(continuous)):
        data, _ = DisplayFormatter().format(widget)
        assert "application/vnd.jupyter.widget-view+json" in data, "Jupyter draws the widget itself"
        name = type(widget).__name__
        assert data["text/plain"] == f"[{name}: an interactive widget. Run this cell in JupyterLab to see it.]"


def test_importing_the_views_needs_no_widget_or_plot_library():
    for path in Path("minicb/viz").glob("*.py"):
        top = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m.split(".")[0] in ("ipywidgets", "matplotlib", "PIL", "numpy", "httpx")], path


# minicb.viz in layers, each importing only from the layers before it, so its imports never go round in a circle:
# the views are pure functions of a trace, the export draws any view, the widgets play views and export them, and
# the charts draw what a lesson measured.
VIZ_LAYERS = [{"draw", "figures"}, {"seats", "kvblocks", "timeline", "text"}, {"export"},
              {"widgets", "playground", "live"}, {"loadcurve", "charts"}, {"__init__"}]


def test_the_views_the_export_and_the_widgets_import_one_way():
    layer = {name: k for k, names in enumerate(VIZ_LAYERS) for name in names}
    for path in sorted(Path("minicb/viz").glob("*.py")):
        assert path.stem in layer, f"{path}: put the new module in a layer of VIZ_LAYERS"
        # Every import, late ones inside functions included: a late import only hides a circle.
        nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in nodes if isinstance(n, ast.Import) for a in n.names]
        names += [f"{n.module}.{a.name}" for n in nodes if isinstance(n, ast.ImportFrom) for a in n.names]
        for parts in (name.split(".") for name in names):
            if parts[:2] == ["minicb", "viz"]:
                # A module of the package, else the package itself (a name its __init__ exports).
                stem = parts[2] if len(parts) > 2 and parts[2] in layer else "__init__"
                assert layer[stem] < layer[path.stem], f"{path} imports {'.'.join(parts)}: not from a lower layer"


def test_decode_batching_plots_step_time_and_tokens_per_second_per_model():
    from minicb.viz import plot_decode_batching

    steps = {"Bard": {1: 0.002, 4: 0.003, 64: 0.03}, "SmolLM2-135M": {1: 0.07, 4: 0.1, 64: 0.5}}
    fig = plot_decode_batching(steps, title="decode")
    step_ax, rate_ax = fig.axes
    for ax, expect in ((step_ax, lambda s, n: s[n] * 1e3), (rate_ax, lambda s, n: n / s[n])):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == set(steps)
        for model, line in lines.items():
            assert list(line.get_xdata()) == sorted(steps[model])
            assert list(line.get_ydata()) == pytest.approx([expect(steps[model], n) for n in sorted(steps[model])])
    assert fig._repr_png_().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="at least one"):
        plot_decode_batching({"Bard": {}})
