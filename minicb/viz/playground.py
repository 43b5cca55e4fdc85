"""The playground: every serving knob on one screen, re-simulated on each change, with a run pinned to compare.

Three layers, so that tests and scripts need no widgets:
    playground_run(settings, preset) -> PlaygroundResult   one simulated run (2 s of CPU for 500 requests)
    render_result(current, pinned)   -> HTML                 the figures, pinned vs current, and a seat strip
    Playground(...)                                          controls + that HTML, re-run on every change

The workload is lesson 07's kind: Bard speaker lines with forced output lengths, Poisson arrivals, and a
share of long documents (a few hundred random token ids) whose unchunked prefill stalls the decodes.
"""
from __future__ import annotations

import dataclasses
import html
import math
import random
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.lab.hardware import PRESETS, HardwarePreset
from minicb.lab.workload import PROLOGUE, WorkloadRequest, arrival_times, bard_prompts, output_lengths
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler.request import CompletionOutput, RequestMetrics, RequestOutput
from minicb.stats.goodput import SloTarget, goodput, meets
from minicb.stats.metrics import summarize
from minicb.stats.trace import DECODE, PREFILL, Trace
from minicb.viz.draw import EMPTY_FILL, PALETTE, darker, svg, text
from minicb.viz.figures import widget_bundle

MAX_OUTPUT_TOKENS = 256            # the longest reply any length distribution draws
LONG_PROMPT_TOKENS = (300, 600)    # a long document's prompt length, uniform in this range, as in slo_workload


@dataclass(frozen=True)
class PlaygroundSettings:
    """One field per control of the playground; an engine knob has EngineConfig's name and meaning. The
    defaults simulate 500 requests (4,300 steps) in about 2 s of CPU, under the CPU preset's knee: p99 TTFT
    meets the SLO, p99 ITL does not."""
    # The workload.
    rate: float = 25.0                     # Poisson arrivals, requests per second
    lengths: str = "heavy"                 # output lengths: "fixed" (32), "uniform" (1-256), "heavy" (Bard-like)
    long_prompt_fraction: float = 0.1      # share of requests whose prompt is a 300-600 token document
    shared_prologue: bool = False          # every speaker line after the same 218-token Prologue (lesson 10)
    num_requests: int = 500
    seed: int = 0
    # The engine.
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    num_blocks: int | None = None          # the KV pool in blocks; None: the preset's
    block_size: int | None = None          # tokens per KV block; None: the preset's
    enable_chunked_prefill: bool = False
    long_prefill_token_threshold: int = 0  # with chunking: the most prompt tokens one request gets per step;
    #                                        0: what the step's budget leaves
    schedule_priority: str = "decode_first"  # or "prefill_first"
    scheduling_policy: str = "fcfs"        # or "priority"
    urgent_fraction: float = 0.2           # under "priority": the share of requests with priority 0, the rest 1
    preemption_mode: str = "recompute"     # or "swap", "auto"
    max_waiting: int | None = None         # admission: reject arrivals beyond this queue length; None: no limit
    max_queue_delay_s: float | None = None  # admission: reject requests not started within this; None: no limit
    enable_prefix_caching: bool = False    # reuse the KV of a prompt's cached full blocks
    # What counts as served well.
    slo: SloTarget = SloTarget()


def playground_workload(s: PlaygroundSettings) -> tuple[list[WorkloadRequest], list[int]]:
    """The requests, in arrival order, and each one's priority (all 0 under fcfs)."""
    n, rng = s.num_requests, random.Random(s.seed)
    prompts: list[str | list[int]] = [PROLOGUE + p if s.shared_prologue else p for p in bard_prompts(n, s.seed)]
    # Token ids from 3 up skip Bard's special tokens, as slo_workload's documents do.
    for i in sorted(rng.sample(range(n), round(s.long_prompt_fraction * n))):
        prompts[i] = [rng.randrange(3, 2000) for _ in range(rng.randint(*LONG_PROMPT_TOKENS))]
    lengths = output_lengths(n, s.lengths, s.seed, high=MAX_OUTPUT_TOKENS, max_len=MAX_OUTPUT_TOKENS)
    times = arrival_times(n, s.rate, s.seed)
    requests = [WorkloadRequest(p, SamplingParams(temperature=0.0, max_tokens=k, ignore_eos=True), t)
                for p, k, t in zip(prompts, lengths, times)]
    priorities = [0] * n
    if s.scheduling_policy == "priority":
        urgent = set(rng.sample(range(n), round(s.urgent_fraction * n)))
        priorities = [0 if i in urgent else 1 for i in range(n)]
    return requests, priorities


def engine_config(s: PlaygroundSettings, preset: HardwarePreset) -> EngineConfig:
    """The simulated engine the settings describe, on the preset's clock and (unless the settings say) pool."""
    return EngineConfig(
        device="cpu", simulate=True, step_cost=preset.step_cost,
        num_blocks=s.num_blocks or preset.num_blocks, block_size=s.block_size or preset.block_size,
        max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        enable_chunked_prefill=s.enable_chunked_prefill, long_prefill_token_threshold=s.long_prefill_token_threshold,
        schedule_priority=s.schedule_priority,
        scheduling_policy=s.scheduling_policy, preemption_mode=s.preemption_mode,
        max_waiting=s.max_waiting, max_queue_delay_s=s.max_queue_delay_s,
        enable_prefix_caching=s.enable_prefix_caching, seed=s.seed)


def serve(engine: LLMEngine, requests: list[WorkloadRequest], priorities: list[int]) -> list[RequestOutput]:
    """Feed requests (sorted by arrival) at their arrival times and step until every one has its result.
    minicb.lab.workload.run_workload does the same without priorities."""
    results: dict[str, RequestOutput] = {}
    ids, k = [], 0
    while len(results) < len(requests):
        while k < len(requests) and requests[k].arrival_time <= engine.clock():
            r = requests[k]
            try:
                ids.append(engine.add_request(r.prompt, r.params, arrival_time=r.arrival_time, priority=priorities[k]))
            except ValueError as err:   # never servable here (a pool too small for it): shown as turned away
                ids.append(f"refused {k}")
                results[ids[-1]] = RequestOutput(ids[-1], None, [], [CompletionOutput("", [], "rejected")], True,
                                                 RequestMetrics(r.arrival_time, finished_time=r.arrival_time),
                                                 reason=str(err))
            k += 1
        if not engine.has_unfinished_requests() and k < len(requests):
            engine.idle_until(requests[k].arrival_time)   # idle until the next arrival
            continue
        results.update((o.request_id, o) for o in engine.step() if o.finished)
    return [results[i] for i in ids]


@dataclass
class PlaygroundResult:
    settings: PlaygroundSettings
    preset: HardwarePreset
    summary: dict                   # minicb.stats.metrics.summarize of the run
    within_slo: int                 # requests served with TTFT and every inter-token gap within the SLO
    goodput_rps: float              # within_slo per second, over the run (first arrival to last result)
    slo_met: bool                   # p99 TTFT and p99 ITL within the targets, few enough rejected
    peak_blocks_used: int           # the most KV blocks held at the end of any step
    num_blocks: int                 # the pool, in blocks
    block_size: int                 # tokens per block
    preemptions: int                # by recompute or by swap
    swaps: int                      # preemptions that swapped KV out to the CPU
    rejections: Counter[str]        # why requests were turned away -> how many
    warnings: list[str]             # what the engine warned about at start (e.g. a pool too small)
    trace: Trace                    # for the seat strip
    run_s: float                    # wall seconds the simulation took

    def figures(self) -> dict[str, float]:
        """The numbers the table shows, by the keys of FIGURES (times in seconds)."""
        s = self.summary
        out = {"output_tok_per_s": s["output_tok_per_s"], "requests_per_s": s["requests_per_s"],
               "goodput_rps": self.goodput_rps, "slo_met": float(self.slo_met),
               "within_slo_pct": 100 * self.within_slo / s["requests"] if s["requests"] else math.nan}
        for metric in ("ttft", "tpot", "itl", "e2e"):
            for q in ("p50", "p99"):
                out[f"{metric}_{q}_s"] = s[metric][q]
        out |= {"served": s["served"], "rejected": s["requests"] - s["served"],
                "kv_peak_pct": 100 * self.peak_blocks_used / self.num_blocks,
                "prefix_hit_pct": 100 * s["prefix_cache_hit_rate"], "preemptions": self.preemptions,
                "swaps": self.swaps, "seat_utilization_pct": 100 * s["seat_utilization"], "steps": s["steps"],
                "duration_s": s["duration_s"]}
        return out


def playground_run(settings: PlaygroundSettings, preset: HardwarePreset,
                   parts: EngineParts | None = None) -> PlaygroundResult:
    """Simulate the settings' workload on the preset's hardware; parts: a lesson's engine parts (the
    learner's code), None for minicb's own."""
    start = time.perf_counter()
    config = engine_config(settings, preset)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = LLMEngine(config, parts)
    outputs = serve(engine, *playground_workload(settings))
    summary = summarize(outputs, engine.trace)
    within, rate = goodput(outputs, settings.slo)
    steps = engine.trace.steps
    return PlaygroundResult(
        settings=settings, preset=preset, summary=summary, within_slo=within, goodput_rps=rate,
        slo_met=meets(summary, settings.slo),
        peak_blocks_used=max((r.blocks_used for r in steps), default=0), num_blocks=config.num_blocks or 0,
        block_size=config.block_size,
        preemptions=sum(o.metrics.num_preemptions for o in outputs), swaps=sum(len(r.swapped_out) for r in steps),
        rejections=Counter(o.reason or "" for o in outputs if o.outputs[0].finish_reason == "rejected"),
        warnings=[str(w.message) for w in caught], trace=engine.trace, run_s=time.perf_counter() - start)


# --- the view ------------------------------------------------------------------------------------

def _seconds(v: float) -> str:
    return "–" if math.isnan(v) else f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"


def _number(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def _percent(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.1f}%"


# key -> (label, format, which way is better: +1 higher, -1 lower, 0 neither)
FIGURES: dict[str, tuple[str, Callable[[float], str], int]] = {
    "output_tok_per_s": ("throughput (output tok/s)", _number, +1),
    "requests_per_s": ("throughput (req/s)", _number, +1),
    "goodput_rps": ("goodput (req/s within the SLO)", _number, +1),
    "within_slo_pct": ("requests within the SLO", _percent, +1),
    "slo_met": ("meets the SLO (p99s, rejections)", lambda v: "yes" if v else "no", +1),
    "ttft_p50_s": ("TTFT p50", _seconds, -1), "ttft_p99_s": ("TTFT p99", _seconds, -1),
    "tpot_p50_s": ("TPOT p50", _seconds, -1), "tpot_p99_s": ("TPOT p99", _seconds, -1),
    "itl_p50_s": ("ITL p50", _seconds, -1), "itl_p99_s": ("ITL p99", _seconds, -1),
    "e2e_p50_s": ("end-to-end p50", _seconds, -1), "e2e_p99_s": ("end-to-end p99", _seconds, -1),
    "served": ("served", _number, +1), "rejected": ("rejected", _number, -1),
    "kv_peak_pct": ("KV pool at its fullest", _percent, 0),
    "prefix_hit_pct": ("prompt tokens from the prefix cache", _percent, +1),
    "preemptions": ("preemptions", _number, -1), "swaps": ("of which swapped", _number, 0),
    "seat_utilization_pct": ("seats doing work", _percent, 0),
    "steps": ("steps", _number, 0), "duration_s": ("simulated duration", _seconds, 0),
}
BETTER, WORSE = "#1a7f37", "#c62828"


def _change(old: float, new: float, better: int) -> str:
    """The change from the pinned value, coloured by whether it helps."""
    if math.isnan(old) or math.isnan(new) or old == new:
        return "" if old == new else "–"
    shown = f"{100 * (new - old) / abs(old):+.0f}%" if old else f"{new - old:+,.4g}"
    color = {1: BETTER, -1: WORSE}.get(better * (1 if new > old else -1), "#444444")
    return f'<span style="color:{color}">{shown}</span>'


def _cell(run: str, key: str, value: float) -> str:
    # data-value carries the exact number, for tests and the browser check; the text is for people.
    return (f'<td class="minicb-value" data-run="{run}" data-metric="{key}" data-value="{value!r}" '
            f'style="text-align:right;padding:1px 10px">{html.escape(FIGURES[key][1](value))}</td>')


def _setting_text(s: PlaygroundSettings) -> dict[str, str]:
    return {f.name: str(getattr(s, f.name)) for f in dataclasses.fields(s)}


def _describe(r: PlaygroundResult) -> str:
    s = r.settings
    cap = s.long_prefill_token_threshold
    chunking = "unchunked" if not s.enable_chunked_prefill else f"chunked ≤ {cap}" if cap else "chunked"
    policy = f"priority ({100 * s.urgent_fraction:.0f}% urgent)" if s.scheduling_policy == "priority" else "fcfs"
    parts = [f"{s.num_requests} requests at {s.rate:g} req/s", f"{s.lengths} lengths",
             f"{100 * s.long_prompt_fraction:.0f}% long prompts", f"{s.max_num_seqs} seats",
             f"{s.max_num_batched_tokens} tokens/step", f"{r.num_blocks} blocks of {r.block_size}", chunking,
             s.schedule_priority, policy, s.preemption_mode]
    if s.shared_prologue:
        parts.insert(3, "a shared prologue")
    if s.enable_prefix_caching:
        parts.append("prefix caching")
    if s.max_waiting is not None:
        parts.append(f"max_waiting {s.max_waiting}")
    if s.max_queue_delay_s is not None:
        parts.append(f"max_queue_delay {s.max_queue_delay_s:g} s")
    return " · ".join(parts)


def render_result(current: PlaygroundResult, pinned: PlaygroundResult | None = None) -> str:
    """The run's figures as an HTML table (with a pinned run: pinned, current and the change), the
    settings that differ, the engine's warnings and rejections, and the current run's seat strip."""
    slo = current.settings.slo
    head = ["", "pinned", "current", "change"] if pinned else ["", "current"]
    rows = ["<tr>" + "".join(f'<th style="text-align:right;padding:1px 10px">{h}</th>' for h in head) + "</tr>"]
    now, before = current.figures(), pinned.figures() if pinned else {}
    for key, (label, _, better) in FIGURES.items():
        cells = [f'<td style="padding:1px 10px">{html.escape(label)}</td>']
        if pinned:
            cells += [_cell("pinned", key, before[key]), _cell("current", key, now[key]),
                      f'<td style="text-align:right;padding:1px 10px">{_change(before[key], now[key], better)}</td>']
        else:
            cells.append(_cell("current", key, now[key]))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    lines = [f"<b>{html.escape(current.preset.name)}</b> · {html.escape(_describe(current))}",
             f"SLO: p99 TTFT ≤ {_seconds(slo.ttft_p99_s)}, p99 ITL ≤ {_seconds(slo.itl_p99_s)}, "
             f"at most {100 * slo.max_rejected_fraction:.0f}% rejected · simulated in {current.run_s:.1f} s"]
    lines.append(f'<details style="color:#666666"><summary>the hardware preset\'s assumptions</summary>'
                 f'{html.escape(current.preset.notes)}</details>')
    if pinned:
        old, new = _setting_text(pinned.settings), _setting_text(current.settings)
        changed = [f"{k} {old[k]} → {new[k]}" for k in new if old[k] != new[k]]
        if pinned.preset != current.preset:
            changed.insert(0, f"hardware {pinned.preset.name} → {current.preset.name}")
        lines.append("changed since the pin: " + html.escape(", ".join(changed) or "nothing"))
    lines += [f'<span style="color:{WORSE}">{html.escape(w)}</span>' for w in current.warnings]
    if current.rejections:
        # Reasons carry each request's own numbers, so show one of them rather than a list of near-repeats.
        reason = current.rejections.most_common(1)[0][0]
        lines.append(f'<span style="color:{WORSE}">{current.rejections.total()} rejected, for instance: '
                     f'{html.escape(reason)}</span>')
    notes = "".join(f"<div>{line}</div>" for line in lines)
    # line-height: the widget's HTML box would otherwise space every row like a control.
    return (f'<div class="minicb-playground" style="font-family:sans-serif;font-size:12px;line-height:1.35">{notes}'
            f'<table class="minicb-figures" style="border-collapse:collapse;margin:6px 0">{"".join(rows)}</table>'
            f"{render_seat_strip(current.trace)}</div>")


def render_seat_strip(trace: Trace, columns: int = 120, rows: int = 32) -> str:
    """The seat grid of a whole run, shrunk: one column per run of consecutive steps, one row per group of
    seats. A cell is as opaque as the share of its seat-steps doing work, dark where prefill outweighs decode.

    Cells of one colour and opacity share one <path>, so a run of thousands of steps stays a few tens of kB.
    """
    steps, seats = trace.steps, trace.num_seats
    if not steps:
        return '<div class="minicb-seatstrip">(no steps)</div>'
    ncol, nrow = min(columns, len(steps)), min(rows, seats)
    group_size = Counter(seat * nrow // seats for seat in range(seats))   # row -> seats in it
    prefill = [[0] * ncol for _ in range(nrow)]   # (rows, columns): seat-steps in prefill
    decode = [[0] * ncol for _ in range(nrow)]    # (rows, columns): seat-steps in decode
    width = [0] * ncol                            # steps per column
    for k, record in enumerate(steps):
        col = k * ncol // len(steps)
        width[col] += 1
        for seat, (_, phase) in record.seats.items():
            row = seat * nrow // seats
            if phase == PREFILL:
                prefill[row][col] += 1
            elif phase == DECODE:
                decode[row][col] += 1
    cw, ch, left, top = max(2, 720 // ncol), max(2, min(8, 128 // nrow)), 4, 4
    shapes: dict[tuple[str, float], list[str]] = {}   # (phase, opacity) -> path pieces, one per cell
    for r in range(nrow):
        for c in range(ncol):
            busy = prefill[r][c] + decode[r][c]
            if busy:
                phase = PREFILL if prefill[r][c] > decode[r][c] else DECODE
                opacity = max(1, round(4 * busy / (group_size[r] * width[c]))) / 4   # in quarters: 0.25 .. 1
                shapes.setdefault((phase, opacity), []).append(f"M{left + c * cw},{top + r * ch}h{cw}v{ch}h{-cw}z")
    colors = {DECODE: PALETTE[0], PREFILL: darker(PALETTE[0])}
    bottom = top + nrow * ch
    body = [f'<rect x="{left}" y="{top}" width="{ncol * cw}" height="{nrow * ch}" fill="{EMPTY_FILL}"/>']
    body += [f'<path d="{"".join(d)}" fill="{colors[phase]}" fill-opacity="{opacity}" data-phase="{phase}" '
             f'data-opacity="{opacity}" data-cells="{len(d)}"/>' for (phase, opacity), d in sorted(shapes.items())]
    body += [text(left, bottom + 10, f"step {steps[0].step}"),
             text(left + ncol * cw, bottom + 10, f"step {steps[-1].step}", "end")]
    x = left
    for fill, opacity, label in ((colors[DECODE], 1, "decode"), (colors[PREFILL], 1, "prefill"),
                                 (colors[DECODE], 0.5, "busy half the time"), (EMPTY_FILL, 1, "empty")):
        body.append(f'<rect x="{x}" y="{bottom + 16}" width="11" height="11" fill="{fill}" fill-opacity="{opacity}"/>'
                    + text(x + 13, bottom + 24, label))
        x += 22 + 5 * len(label)
    per_row = "one row per seat" if nrow == seats else f"{nrow} rows of {seats / nrow:.3g} seats"
    per_col = "one column per step" if ncol == len(steps) else f"{ncol} columns of {len(steps) / ncol:.3g} steps"
    caption = f"seats over the run: {per_row}, {per_col} · seats doing work {100 * trace.seat_utilization:.0f}%"
    return (f'<div class="minicb-seatstrip">{svg(max(left + ncol * cw + 4, 480), bottom + 32, {}, "".join(body))}'
            f"<div>{html.escape(caption)}</div></div>")


# --- the widget ----------------------------------------------------------------------------------

class Playground:
    """Controls for every PlaygroundSettings field and the hardware preset; each change re-simulates and
    redraws. Headless, set `controls[name].value` and read `.html`; `pin()` keeps the current run for comparison."""

    def __init__(self, presets: dict[str, HardwarePreset] | None = None, num_requests: int = 500,
                 slo: SloTarget = SloTarget(), seed: int = 0, parts: EngineParts | None = None):
        import ipywidgets as w   # here, not at the top: `import minicb.viz` must work without it

        self.presets = presets or PRESETS
        self.parts = parts   # a lesson's parts, so the playground runs the learner's code too
        # The controls start at the defaults; what no control changes is fixed here.
        base = self.fixed = PlaygroundSettings(num_requests=num_requests, slo=slo, seed=seed)
        first = next(iter(self.presets))
        pool = self.presets[first]
        # Room for the longest label (max_num_batched_tokens) and a slider track a mouse can use.
        wide, row = {"description_width": "200px"}, w.Layout(width="470px")
        quiet = dict(continuous_update=False, style=wide, layout=row)   # sliders re-run once, when released
        plain = dict(style=wide, layout=row)
        self.preset = w.Dropdown(options=list(self.presets), value=first, description="hardware", style=wide,
                                 layout=w.Layout(width="620px"))
        self.controls: dict[str, Any] = {
            # From 1 req/s: below that, 500 requests run mostly alone, one step per token, for tens of seconds.
            "rate": w.FloatLogSlider(value=base.rate, base=10, min=0, max=4, step=0.05,
                                     description="arrival rate (req/s)", **quiet),
            "lengths": w.Dropdown(options=[("fixed (32 tokens)", "fixed"), ("uniform (1-256)", "uniform"),
                                           ("heavy tail (Bard-like)", "heavy")], value=base.lengths,
                                  description="output lengths", **plain),
            "long_prompt_fraction": w.FloatSlider(value=base.long_prompt_fraction, min=0, max=1, step=0.05,
                                                  description="long prompts (share)", **quiet),
            "shared_prologue": w.Checkbox(value=base.shared_prologue, description="shared prologue", **plain),
            "max_num_seqs": w.IntSlider(value=base.max_num_seqs, min=1, max=256, description="max_num_seqs",
                                        **quiet),
            "max_num_batched_tokens": w.IntSlider(value=base.max_num_batched_tokens, min=16, max=8192, step=16,
                                                  description="max_num_batched_tokens", **quiet),
            "num_blocks": w.BoundedIntText(value=base.num_blocks or pool.num_blocks, min=1, max=10**7,
                                           description="KV pool (blocks)", **quiet),
            "block_size": w.Dropdown(options=sorted({1, 2, 4, 8, 16, 32, 64, 128, pool.block_size}),
                                     value=base.block_size or pool.block_size, description="block_size", **plain),
            "enable_chunked_prefill": w.Checkbox(value=base.enable_chunked_prefill, description="chunked prefill",
                                                 **plain),
            "long_prefill_token_threshold": w.IntSlider(value=base.long_prefill_token_threshold, min=0, max=2048,
                                                        step=16, description="chunk cap (tokens, 0: budget)",
                                                        **quiet),
            "schedule_priority": w.Dropdown(options=["decode_first", "prefill_first"], value=base.schedule_priority,
                                            description="step's budget goes", **plain),
            "scheduling_policy": w.Dropdown(options=["fcfs", "priority"], value=base.scheduling_policy,
                                            description="policy", **plain),
            "urgent_fraction": w.FloatSlider(value=base.urgent_fraction, min=0, max=1, step=0.05,
                                             description="priority 0 (share)", **quiet),
            "preemption_mode": w.Dropdown(options=["recompute", "swap", "auto"], value=base.preemption_mode,
                                          description="preemption", **plain),
            "enable_prefix_caching": w.Checkbox(value=base.enable_prefix_caching, description="prefix caching",
                                                **plain),
            "max_waiting": w.BoundedIntText(value=base.max_waiting or 0, min=0, max=10**7,
                                            description="max_waiting (0: off)", **quiet),
            "max_queue_delay_s": w.BoundedFloatText(value=base.max_queue_delay_s or 0, min=0, max=10**4, step=0.1,
                                                    description="max_queue_delay_s (0: off)", **quiet),
        }
        self.pin_button = w.Button(description="pin this run", tooltip="keep its figures next to the next runs'")
        self.unpin_button = w.Button(description="unpin", disabled=True)
        self.progress_note = w.HTML()
        self.view = w.HTML()
        self.current: PlaygroundResult | None = None
        self.pinned: PlaygroundResult | None = None
        self._holding = False

        self.preset.observe(self._preset_changed, names="value")
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.pin_button.on_click(lambda _: self.pin())
        self.unpin_button.on_click(lambda _: self.unpin())
        c = self.controls
        workload = w.VBox([w.HTML("<b>workload</b>"), c["rate"], c["lengths"], c["long_prompt_fraction"],
                           c["shared_prologue"], w.HTML("<b>KV cache</b>"), c["num_blocks"], c["block_size"],
                           c["preemption_mode"], c["enable_prefix_caching"]])
        engine = w.VBox([w.HTML("<b>scheduler</b>"), c["max_num_seqs"], c["max_num_batched_tokens"],
                         c["enable_chunked_prefill"], c["long_prefill_token_threshold"], c["schedule_priority"],
                         c["scheduling_policy"], c["urgent_fraction"], w.HTML("<b>admission</b>"), c["max_waiting"],
                         c["max_queue_delay_s"]])
        self.widget = w.VBox([self.preset, w.HBox([workload, engine]),
                              w.HBox([self.pin_button, self.unpin_button, self.progress_note]), self.view])
        self.widget.add_class("minicb-playground-widget")
        self.run()

    @property
    def settings(self) -> PlaygroundSettings:
        values = {name: c.value for name, c in self.controls.items()}
        # A number box cannot be empty, so the queue bounds show "off" as 0; in EngineConfig, 0 is a bound.
        for bound in ("max_waiting", "max_queue_delay_s"):
            values[bound] = values[bound] or None
        return dataclasses.replace(self.fixed, **values)

    def run(self) -> PlaygroundResult | None:
        """Simulate the controls' settings and redraw; a setting the engine refuses shows its message instead."""
        # Knobs that do nothing under the other knobs' values are greyed out, not hidden.
        self.controls["urgent_fraction"].disabled = self.controls["scheduling_policy"].value != "priority"
        self.controls["long_prefill_token_threshold"].disabled = not self.controls["enable_chunked_prefill"].value
        self.progress_note.value = "simulating…"
        try:
            self.current = playground_run(self.settings, self.presets[self.preset.value], self.parts)
        except ValueError as e:   # EngineConfig's checks say what to change
            self.progress_note.value = ""
            self.view.value = f'<div class="minicb-playground-error" style="color:{WORSE}">{html.escape(str(e))}</div>'
            return None
        self.progress_note.value = ""   # the figures say how long the run took
        self.view.value = render_result(self.current, self.pinned)
        return self.current

    def pin(self) -> None:
        """Keep the current run; later runs show next to it until unpin()."""
        self.pinned = self.current
        self.unpin_button.disabled = self.pinned is None
        if self.current is not None:
            self.view.value = render_result(self.current, self.pinned)

    def unpin(self) -> None:
        self.pinned = None
        self.unpin_button.disabled = True
        if self.current is not None:
            self.view.value = render_result(self.current)

    def _changed(self, change: dict) -> None:
        if not self._holding:
            self.run()

    def _preset_changed(self, change: dict) -> None:
        # Another machine holds another pool: load it into the controls, then run once, not once per control.
        pool = self.presets[change["new"]]
        self._holding = True
        try:
            block = self.controls["block_size"]
            block.options = sorted(set(block.options) | {pool.block_size})
            block.value = pool.block_size
            self.controls["num_blocks"].value = pool.num_blocks
        finally:
            self._holding = False
        self.run()

    @property
    def html(self) -> str:
        return self.view.value

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self, self.widget, **kwargs)
