"""Every figure the docs and the lessons' text quote is the figure its source shows: the stored outputs of a
lesson's cell, or bench/README.md. When outputs are refreshed and a number moves, the test names the file,
the figure, the quoted text and the output that disagrees, so the doc is fixed in a minute.

To add a quoted figure, add one line to FIGURES: Figure(doc, quote, source, cell, shown).
- doc: the file that quotes it, docs/X.md, README.md, or notebooks/NN.ipynb (then its markdown cells).
- quote: the quoted text, literally, with {name} where a number stands and … for "anything, as little as
  can be", spaces around it included. Every run of whitespace counts as one space, in the template and in the texts, so wrap freely.
- source: notebooks/NN.ipynb (the stored outputs of one code cell) or an .md file (its text).
- cell: a string that only that code cell's source contains (None for an .md source): found by content,
  so inserting a cell moves nothing.
- shown: the same form over the source's text, with the same {names} (it may have more; only the quote's
  are compared, and a quote may name one twice). derive: names the output does not print, computed from the shown numbers (a dict of
  floats), e.g. a ratio the text quotes.
A quoted number agrees when it is the shown one rounded to the quoted number of decimals: "1.3" quotes 1.32.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
L00, L01, L02, L03, L04 = (f"notebooks/{n}.ipynb" for n in (
    "00_setup_and_model", "01_static_batching", "02_continuous_batching", "03_selective_batching",
    "04_paged_kv_cache"))
L05, L09 = "notebooks/05_triton_attention.ipynb", "notebooks/09_serving.ipynb"
L06, L06B, L07, L08, L10 = (f"notebooks/{n}.ipynb" for n in (
    "06_preemption", "06b_preemption_costs", "07_scheduling_and_slos", "08_capstone", "10_prefix_caching"))
L07B = "notebooks/07b_admission_and_priorities.ipynb"
L03A = "notebooks/03_selective_batching_appendix.ipynb"
BENCH = "bench/README.md"
CHEATSHEET, GLOSSARY, WORKSHOP = "docs/CHEATSHEET.md", "docs/GLOSSARY.md", "docs/WORKSHOP.md"


@dataclass(frozen=True)
class Figure:
    doc: str
    quote: str
    source: str
    cell: str | None
    shown: str
    derive: dict[str, Callable[[dict[str, float]], float]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{Path(self.doc).name}:{'/'.join(names(self.quote))}"


# Cells found by what their code does.
A_D = "utilization = {useful}/{total}"                       # lesson 01's worked example
TAIL = "tail_work = make_workload"                          # lesson 06b §2: the ample pool against 86 blocks
TAIL_SHOWN = ("ample pool 0 {a50} s {a99} s {tpot_a50} ms {tpot_a99} ms 86 blocks {pre} {b50} s {b99} s "
              "{tpot_b50} ms {tpot_b99} ms")
HIT = "hit = [i for i, o in enumerate(small)"                 # lesson 06b §2: who was preempted
HIT_SHOWN = ("{n_hit} of 400 requests were preempted at least once, up to {max_pre} times … median {med}x, "
             "90th percentile {p90}x, worst {worst}x never preempted {n_never} requests: latency p50 {never50} s, "
             "p99 {never99} s preempted {n_pre} requests: latency p50 {pre50} s, p99 {pre99} s of the 4 slowest "
             "requests (the p99 tail), {k4} were preempted of the 20 slowest requests (the p95 tail), {k20} were")
PRESSED = "pressed = course.engine(lesson=6"                  # lesson 06 §1: ten requests on 16 blocks
PRESSED_SHOWN = "10 requests in {steps} steps; {pre} preemptions (step, request preempted): [({first}, '8'),"
AUTO = 'auto = course.engine(lesson=6'                        # lesson 06 §2: recompute or swap, by the toy cost model
AUTO_SHOWN = "preemptions: {pre}: swapped out {swapped}, recomputed {recomputed};"
SEATS = "for seats in (4, 8, 16, 32, 64)"                      # lesson 06b §3
SEATS_SHOWN = ("4 {pre4} {tps4} {p50_4} s {p99_4} s 8 {pre8} {tps8} {p50_8} s {p99_8} s 16 {pre16} {tps16} "
               "{p50_16} s {p99_16} s 32 {pre32} {tps32} {p50_32} s {p99_32} s 64 {pre64} {tps64} {p50_64} s "
               "{p99_64} s")
ORDER = 'for mode in ("decode_first", "prefill_first")'      # lesson 07 §1
ORDER_SHOWN = ("64 seats, decode_first {d64_50} ms {d64_99} ms {d64_tpot50} ms {d64_tpot99} ms {d64_itl} ms {d64_w} "
               "64 seats, prefill_first {p64_50} ms {p64_99} ms {p64_tpot50} ms {p64_tpot99} ms {p64_itl} ms {p64_w} "
               "32 seats, decode_first {d32_50} ms {d32_99} ms {d32_tpot50} ms {d32_tpot99} ms {d32_itl} ms {d32_w} "
               "32 seats, prefill_first {p32_50} ms {p32_99} ms {p32_tpot50} ms {p32_tpot99} ms {p32_itl} ms {p32_w}")
STALL = "for chunked, budget in ((False, 1024), (True, 128))"   # lesson 07 §3
STALL_SHOWN = ("off, budget 1024: decoders' ITL p50 {off50} ms, p99 {off99} ms, … first token {off_first} ms … "
               "on, budget 128 : decoders' ITL p50 {on50} ms, p99 {on99} ms, … first token {on_first} ms")
OVERLOAD = "within_2_s = RequestSlo"                          # lesson 07b §1
OVERLOAD_SHOWN = ("capacity {capacity} requests/s … no admission control {sent} 0 {on_time0} {g0} req/s {lat0} s … "
                  "max_queue_delay_s=0.5 {served1} {rejected1} {on_time1} {g1} req/s … "
                  "max_waiting=32 {served2} {rejected2} {on_time2} {g2} req/s")
LOAD = "points = load_curve("                                 # lesson 08 §5b
LOAD_SHOWN = ("20 req/s: … ITL {itl20} ms, goodput {g20} req/s 25 req/s: … ITL {itl25} ms, goodput {g25} req/s "
              "30 req/s: … goodput {g30} req/s 40 req/s: … goodput {g40} req/s 50 req/s: p99 first token {ttft50} s, "
              "… goodput {g50} req/s")
PROLOGUE = "with_prologue(base, None)"                        # lesson 10 §2, real Bard (timed)
PROLOGUE_SHOWN = ("shared prologue off {pf_off} 0% {off50} ms {off99} ms shared prologue on {pf_on} {hit}% {on50} ms "
                  "{on99} ms shuffled, no sharing off {sh_pf} 0% {sh_off50} ms … shuffled, no sharing on … {sh_on50} ms")
CROWD = "crowd = with_prologue"                               # lesson 10 §3
CROWD_SHOWN = ("caching off: at most {off} running at once, {off_steps} steps, all served in {off_s} s … "
               "caching on : at most {on} running at once, {on_steps} steps, all served in {on_s} s")
REPREEMPT = "pressed = with_prologue"                         # lesson 10 §6
REPREEMPT_SHOWN = ("caching off: {pre_off} preemptions, {pf_off} tokens prefilled for {prompts} prompt tokens, all "
                   "served in {off_s} s … caching on : {pre_on} preemptions, {pf_on} tokens prefilled for … "
                   "all served in {on_s} s")

FIGURES = [
    # docs/CHEATSHEET.md
    Figure(CHEATSHEET, "decoders' ITL p99 {off} → {on} ms, p50 {off50} → {on50} ms", BENCH, None,
           "chunked prefill off (budget 1,024): p50 {off50} ms, p99 {off} ms; on (budget 128): p50 {on50} ms, "
           "p99 {on} ms"),
    Figure(CHEATSHEET, "`max_queue_delay_s=0.5` rejected {rejected1} of {sent} and raised goodput from {g0} to "
           "{g1} req/s", L07B, OVERLOAD, OVERLOAD_SHOWN),
    Figure(CHEATSHEET, "a too-small pool ({pre} preemptions) moved e2e p50 {a50} → {b50} s but p99 {a99} → {b99} s",
           L06B, TAIL, TAIL_SHOWN),
    Figure(CHEATSHEET, "static {static}% vs continuous {cont}% (bench/README.md)", BENCH, None,
           "| static (finished rows idle) | … | … | {static}% | 0 | | continuous | … | … | {cont}% |"),
    Figure(CHEATSHEET, "contiguous fits {contiguous} sequences where paged fits {paged}", L04, "def kv_run",
           "contiguous {steps_c} {contiguous} … paged {steps_p} {paged} "),
    Figure(CHEATSHEET, "{hit}% of prompt tokens from the cache, TTFT p50 {off50} → {on50} ms", L10, PROLOGUE,
           PROLOGUE_SHOWN),
    Figure(CHEATSHEET, "{on} requests running where {off} did in a 64-block pool", L10, CROWD, CROWD_SHOWN),
    # docs/GLOSSARY.md
    Figure(GLOSSARY, "(bench/README.md measured {waste}% on 128 Bard requests)", BENCH, None,
           "| padded (dense, computes pads) | … | … | … | {waste}% of computed tokens |"),
    Figure(GLOSSARY, "The A-D example of lesson 01 used {useful} of {total} ({pct}%)", L01, A_D,
           "utilization = {useful}/{total} =", {"pct": lambda g: 100 * g["useful"] / g["total"]}),
    Figure(GLOSSARY, "while {differ} of {n} greedy runs diverge", L03A, "closest = (float(\"inf\")",
           "{differ} of {n} requests differ from their solo run"),
    Figure(GLOSSARY, "p99 TTFT ≤ {ttft} s and p99 ITL ≤ {itl} ms over the requests served, turning away at most {rej}%",
           L07B, "print(SloTarget())", "SloTarget(ttft_p99_s={ttft}, itl_p99_s={itl_s}, max_rejected_fraction={rej_f})",
           {"itl": lambda g: 1e3 * g["itl_s"], "rej": lambda g: 100 * g["rej_f"]}),
    # docs/WORKSHOP.md
    Figure(WORKSHOP, "the A-D example, {useful} of {total} seat-steps", L01, A_D, "utilization = {useful}/{total} ="),
    # lesson 00
    Figure(L00, "{bytes} bytes for Bard", L00, "kv_per_token = 2 *", "= {bytes} bytes per token"),
    Figure(L00, "gives {kib} KiB per token", L00, '"7B-class model, fp16:"', "7B-class model, fp16: {kib} KiB per token"),
    Figure(L00, "about {one} FLOP per byte alone, {x32} with 32 sequences, and still {x256} with 256", L00,
           "ridge = RooflineCost", "decode, 1 sequence of 128 cached {b1} {one} below … decode, 32 sequences of 128 "
           "cached {b32} {x32} below … decode, 256 sequences of 128 cached {b256} {x256} below"),
    # lesson 01
    Figure(L01, "the hardware did useful work in {useful}: **{pct}%**", L01, A_D, "utilization = {useful}/{total} =",
           {"pct": lambda g: 100 * g["useful"] / g["total"]}),
    Figure(L01, "A produced its last token in step {last}, but got it back with everyone else after step {back}",
           L01, "def last_token_step", "A: 4 tokens, last token in step {last}, returned after step {back}"),
    # lesson 02
    Figure(L02, "in static batches of 8: {s_steps} steps, {s_util}% utilization", L02, "static_outs = run_workload",
           "static {s_steps} {s_util}% continuous {c_steps} {c_util}%"),
    Figure(L02, "**(b)**: {c_steps} steps, utilization {c_util}%", L02, "static_outs = run_workload",
           "static {s_steps} {s_util}% continuous {c_steps} {c_util}%"),
    Figure(L02, "**(b)**: {sg}× in steps ({st} against {ct}), {tg}× in simulated tokens/s. Static batching keeps "
           "{su}% of the seat-steps busy. Continuous batching raises that to {cu}%", L02, "step_gains, gains = [], []",
           "heavy (Bard corpus) {su}% {cu}% {st} {ct} {sg}x {tg}x"),
    # lesson 03, and its appendix (notebooks/03_selective_batching_appendix.ipynb)
    Figure(L03A, "**(a)**: {differ} of {n}, over {tokens} greedy tokens", L03A, "closest = (float(\"inf\")",
           "{differ} of {n} requests differ from their solo run ({tokens} greedy tokens compared)"),
    Figure(L03A, "From B = 2 on, {a}% of its entries differ, and from B = 4 on, {b}%", L03A, "linear = next(m for m in",
           "B = 2: bitwise equal False entries that differ {a}% … B = 3: bitwise equal False entries that differ "
           "{a}% … B = 4: bitwise equal False entries that differ {b}%"),
    Figure(L03A, "In bf16, where near-ties are one rounding step apart, {n} of the 16 flipped", L03A, "half = LLM(None",
           "{n} of 16 requests differ from their solo run in bf16"),
    Figure(L03, "**(b)**: roughly {x}×", L03, "at batch 32 the flat step is", "the flat step is {x}x faster"),
    Figure(L03A, "most logits differ ({pct}% of them in the run stored here)", L03A, "together16 = runner.logits",
           "logits that differ: {pct}% of"),
    # lesson 04
    Figure(L04, "**(c)**: {cu}%, against {pu}% with paging", L04, "def kv_run",
           "contiguous {cs} {cmax} {cmean} {cu}% paged {ps} {pmax} {pmean} {pu}%"),
    Figure(L04, "4 at a time: {cs} steps", L04, "def kv_run", "contiguous {cs} {cmax} {cmean} {cu}%"),
    Figure(L04, "runs up to all {pmax} seats and finishes in {ps} steps", L04, "def kv_run",
           "paged {ps} {pmax} {pmean} {pu}%"),
    Figure(L04, "**(a)**: {pre}. The pool did fill up ({used} of {n} blocks in use at the peak)", L04,
           "check_kv_invariants=True)   # the pool checked", "most blocks in use: {used} of {n} preemptions: {pre}"),
    # lesson 05
    Figure(L05, "The last line gives the stored run's ratio, about {x}×", L05, "one call over the batch is",
           "one call over the batch is {x}x faster"),
    # lesson 06
    Figure(L06, "**(b)**: {pre} preemptions, of … it first runs out at step {first},", L06, PRESSED, PRESSED_SHOWN),
    Figure(L06, "**(b)**: {swapped} of the {pre} victims were swapped and {recomputed} recomputed", L06, AUTO,
           AUTO_SHOWN),
    Figure(L06, "victim, at step {first}, a few steps after it started", L06, PRESSED, PRESSED_SHOWN),
    Figure(L06, "(up to {swapped} at once here)", L06, "from itertools import accumulate",
           "swapped at most {swapped}"),
    Figure(L06, "**(b)**: {pre} each, in {steps} steps each", L06, "from itertools import accumulate",
           "swap ({steps} steps, {pre} preemptions): … recompute ({steps__2} steps, {pre__2} preemptions)"),
    # lesson 06b
    Figure(L06B, "At 256 tokens recomputing took tens of milliseconds against a millisecond or two for the swap "
           "({re} ms against {swap} ms, {x}x)", L06B, "cpu_cost = measure_preemption_cost", "256 {re} ms {swap} ms",
           {"x": lambda g: g["re"] / g["swap"]}),
    Figure(L06B, "With an ample pool these requests take about {a50} s at the median and {a99} s at p99", L06B, TAIL,
           TAIL_SHOWN),
    Figure(L06B, "It went from {a99} s to {b99} s ({x}x), while p50 went from {a50} s to {b50} s ({pct}%)",
           L06B, TAIL, TAIL_SHOWN,
           {"x": lambda g: g["b99"] / g["a99"], "pct": lambda g: 100 * (g["b50"] / g["a50"] - 1)}),
    Figure(L06B, "The worst-hit preempted request was {worst}x slower than with the ample pool. The median one was "
           "{med}x slower, and one in ten {p90}x or worse. The preempted requests are the tail: all {k4} of the 4 "
           "slowest, all {k20} of the 20 slowest", L06B, HIT, HIT_SHOWN),
    Figure(L06B, "the first victim again the next time the pool runs out: up to {max_pre} times here", L06B, HIT,
           HIT_SHOWN),
    Figure(L06B, "the per-token p99 more than doubles too ({tpot_a99} to {tpot_b99} ms)", L06B, TAIL, TAIL_SHOWN),
    Figure(L06B, "The {n_never} requests never preempted nearly kept their median ({never50} s", L06B, HIT, HIT_SHOWN),
    Figure(L06B, "32: {tps32} tok/s, the most, with {pre32} preemptions. 64 seats serve fewer ({tps64} tok/s) at a "
           "worse p99 ({p99_64} s against {p99_32} s). Their {pre64} preemptions", L06B, SEATS, SEATS_SHOWN),
    Figure(L06B, "({tps4}, {tps8}, {tps16}, {tps32} tok/s). The p99 fell up to 16 seats ({p99_4}, {p99_8}, {p99_16} s), "
           "then stayed flat ({p99_32} s at 32)",
           L06B, SEATS, SEATS_SHOWN),
    Figure(L06B, "A too-small pool (86 blocks, {pre} preemptions) moved the latency p50 from {a50} s to {b50} s but "
           "p99 from {a99} s to {b99} s", L06B, TAIL, TAIL_SHOWN),
    Figure(L06B, "Preempted requests ran up to {worst}x slower than with an ample pool, and all {k20} of the 20 "
           "slowest were preempted", L06B, HIT, HIT_SHOWN),
    Figure(L06B, "(the 7B at 400 TFLOP/s: never on PCIe 3.0 or 4.0, from {a5} tokens on 5.0)", L06B,
           "crossover_table(RooflineCost(", "PCIe 3.0 x16, 12 GB/s never never {c3} never PCIe 4.0 x16, 25 GB/s never "
           "never {c4} {d4} PCIe 5.0 x16, 50 GB/s {a5} never {c5} {d5}"),
    Figure(L06B, "With a copy per piece (the last line), recompute wins in every case", L06B,
           "crossover_table(RooflineCost(", "swapping is cheaper within the model's context in 0 of these 12 cases"),
    # lesson 07
    Figure(L07, "With a pool too small, p99 grew {x}x while p50 grew {pct}%", L06B, TAIL, TAIL_SHOWN,
           {"x": lambda g: g["b99"] / g["a99"], "pct": lambda g: 100 * (g["b50"] / g["a50"] - 1)}),
    Figure(L07, "With 64 seats, TTFT p99 is lower: {p64_99} ms against {d64_99} ms. The p50 is lower too, {p64_50} "
           "against {d64_50} ms. The streams pay: TPOT p99 is {p64_tpot99} against {d64_tpot99} ms, and ITL p99 "
           "{p64_itl} against {d64_itl} ms", L07, ORDER, ORDER_SHOWN),
    Figure(L07, "TTFT p99 is a little higher, {p32_99} ms against {d32_99} ms. Only the p50 is still lower, {p32_50} "
           "against {d32_50} ms. Up to {p32_w} requests wait for a seat, against {d32_w} under decode first",
           L07, ORDER, ORDER_SHOWN),
    Figure(L07, "The mean gap is {mean} ms, but the p99 gap is {p99} ms", L07, "longest = max(outs",
           "mean {mean} ms, p99 {p99} ms"),
    Figure(L07, "About 30 ms: {on99} ms against {off99} ms, five times lower. The median gap barely moved, {on50} "
           "against {off50} ms", L07, STALL, STALL_SHOWN),
    Figure(L07, "Their first token came after {on_first} ms on average, against {off_first} ms", L07, STALL,
           STALL_SHOWN),
    # lesson 07b
    Figure(L07B, "About 300: {on_time0} of 1,000 within 2 s. That is a goodput of {g0} requests/s, and the median "
           "latency is {lat0} s. With `max_queue_delay_s=0.5`, {rejected1} are turned away at once. Of the {served1} "
           "served, {on_time1} are on time. That is {g1} requests/s, {x}x as much. It is even a little more than the "
           "capacity of {capacity} requests/s", L07B, OVERLOAD, OVERLOAD_SHOWN, {"x": lambda g: g["g1"] / g["g0"]}),
    Figure(L07B, "`max_waiting=32` does nearly as well ({g2})", L07B, OVERLOAD, OVERLOAD_SHOWN),
    Figure(L07B, "A quarter later: {p_o} s against {f_o} s, {pct}% more. … median first token came after {p_u} s "
           "instead of {f_u} s", L07B, "urgent = [i % 10 == 0", "fcfs {f_u} s {f_ud} s {f_o} s {f_od} s priority "
           "{p_u} s {p_ud} s {p_o} s {p_od} s the others' first token p50: +{pct}% under priorities"),
    Figure(L07B, "the defaults reach {itl} ms. … TTFT misses too, at {ttft} s", L07B, "print(SloTarget())",
           "defaults: misses the SLO: served 400, rejected 0, p99 TTFT {ttft} s, p99 ITL {itl} ms"),
    # lesson 08
    Figure(L08, "**(c)**: p50 {p50} ms, p99 {p99} ms, about {x}×. The queue is not the cause: the time to first "
           "token stays at {ttft99} ms even at p99", L08, "load = make_workload(3_000",
           "time to first token p50 … p99 {ttft99} ms … end to end p50 {p50} ms p90 … p99 {p99} ms",
           {"x": lambda g: g["p99"] / g["p50"]}),
    Figure(L08, "**(b)**: {gain}×, from {s_steps} static steps to {c_steps} continuous ones ({x}× fewer)", L08,
           "def steps_and_rate", "heavy-tailed (chat) {s_steps} {c_steps} {gain}x",
           {"x": lambda g: g["s_steps"] / g["c_steps"]}),
    Figure(L08, "goodput peaks at 30 req/s ({g30} req/s, against {g25} at 25). The knee, where p99 first token "
           "passes 1 s, is at 50 req/s ({ttft50} s). Between 20 and 25 req/s the p99 ITL jumps from {itl20} ms to "
           "{itl25} ms", L08, LOAD, LOAD_SHOWN),
    Figure(L08, "({g40} req/s at 40, then {g50} at 50)", L08, LOAD, LOAD_SHOWN),
    Figure(L08, "(25 req/s: {g25} req/s, then {g30} at 30, its peak)", L08, LOAD, LOAD_SHOWN),
    Figure(L08, "took {hf} s against {padded} s for padded `generate`. HF's manager takes the same {steps} steps as "
           "minicb", L08, "runs = {", "HF continuous batching {hf} s {steps} steps, … HF generate, padded static "
           "{padded} s"),
    # lesson 09
    Figure(L09, "**(b)**: B sent {after} of its {n} pieces after A's stream ended", L09, "a_done = events.index",
           "B sent {after} of its {n} pieces after A's stream ended"),
    Figure(L09, "from 48 to 144 requests per second it grew {ttft}× in the run stored here, output tokens per second "
           "{tok}×", L09, "at_48, at_144 =", "output tok/s grew {tok}x, p99 TTFT {ttft}x"),
    Figure(L09, "**(b)**: aborted by the server: {n}; requests running: {running}; KV cache in use: {kv}%", L09,
           "aborted_before = server_state()", "aborted by the server: {n}; requests running: {running}; KV cache in "
           "use: {kv}%"),
    Figure(L08, "Only {util}% of the seat-steps above did work", L08, "load = make_workload(3_000",
           "seat utilization {util}%"),
    Figure(L08, "keeps every seat busy while a request waits, and serves about {rate} requests per second", L08,
           "over = make_workload(2_000", "200 req/s: … seats busy {u}% over the run, 100% while one waited; {rate} "
           "req/s served"),
    Figure(L02, "continuous batching keeps {c}% of the seats busy. Static batching keeps {s}%", L02,
           "summary['seat_utilization_while_queued']", "static a request waited after {sq}% of the steps; seats "
           "busy: {su}% over the run, {s}% while one waited continuous a request waited after {cq}% of the steps; "
           "seats busy: {cu}% over the run, {c}% while one waited"),
    # lesson 10
    Figure(L10, "about {x} times sooner in the run stored here ({off50} to {on50} ms at p50, {off99} to {on99} ms at p99)",
           L10, PROLOGUE, PROLOGUE_SHOWN, {"x": lambda g: round(g["off50"] / g["on50"], -1)}),
    Figure(L10, "**(c)**: about a tenth, {pf_on} of the {pf_off} prompt tokens", L10, PROLOGUE, PROLOGUE_SHOWN),
    Figure(L10, "Here TTFT p50 went from {sh_off50} to {sh_on50} ms", L10, PROLOGUE, PROLOGUE_SHOWN),
    Figure(L10, "The same 48 requests are served about {x}x sooner", L10, CROWD, CROWD_SHOWN,
           {"x": lambda g: g["off_s"] / g["on_s"]}),
    Figure(L10, "**(b)**: all at once, nearly: {miss}% up to 64 blocks, {mid}% at 96, then {hit}% from 128", L10,
           "eight = with_prologue", " 64 {miss}% {prefilled64} 96 {mid}% {prefilled96} 128 {hit}% "),
    Figure(L10, "({pre_on} preemptions against {pre_off}). … prefills only what is not there: {pf_on} tokens against "
           "{pf_off} (without caching the prompts alone are {prompts}, plus every recompute). All are served in {on_s} "
           "simulated seconds against {off_s}", L10, REPREEMPT, REPREEMPT_SHOWN),
    Figure(L10, "about a tenth of the prompt tokens were prefilled ({pf_on} of {pf_off}). The first token came about "
           "{x} times sooner ({off50} to {on50} ms at p50)", L10, PROLOGUE, PROLOGUE_SHOWN,
           {"x": lambda g: round(g["off50"] / g["on50"], -1)}),
    Figure(L10, "Shared blocks are held once: {on} requests ran where {off} did, and 48 were served about {x}x sooner",
           L10, CROWD, CROWD_SHOWN, {"x": lambda g: g["off_s"] / g["on_s"]}),
]


def names(template: str) -> list[str]:
    return re.findall(r"\{(\w+)\}", template)


def pattern(template: str) -> re.Pattern:
    """The template as a regex: literal text, {name} a number, … the least of anything. A name quoted
    twice gets a group of its own each time (name, name__2, ...), each compared with the one shown."""
    regex, seen = [], []
    for part in re.split(r"(\{\w+\}| ?… ?)", squeeze(template)):
        if part.strip() == "…":
            regex.append(".*?")
        elif re.fullmatch(r"\{\w+\}", part):
            seen.append(part[1:-1])
            count = seen.count(part[1:-1])
            regex.append(f"(?P<{part[1:-1]}{f'__{count}' if count > 1 else ''}>{NUMBER})")
        else:
            regex.append(re.escape(part))
    return re.compile("".join(regex))


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@cache
def read(path: Path) -> str | dict:
    return json.loads(path.read_text()) if path.suffix == ".ipynb" else path.read_text()


def doc_text(root: Path, doc: str) -> str:
    content = read(root / doc)
    if isinstance(content, dict):   # a lesson: its markdown cells
        content = "\n\n".join("".join(c["source"]) for c in content["cells"] if c["cell_type"] == "markdown")
    return squeeze(content)


def output_text(root: Path, figure: Figure) -> tuple[str, str]:
    """(where, text): the source's text, or the stored outputs of the one code cell whose code holds figure.cell."""
    content = read(root / figure.source)
    if isinstance(content, str):
        return figure.source, squeeze(content)
    found = [(i, c) for i, c in enumerate(content["cells"])
             if c["cell_type"] == "code" and figure.cell in "".join(c["source"])]
    if len(found) != 1:
        raise LookupError(f"{len(found)} code cells of {figure.source} contain {figure.cell!r}, not one: make the "
                          f"row's `cell` a string that only the source cell's code has")
    i, cell = found[0]
    texts = [o.get("text") or o.get("data", {}).get("text/plain") or "" for o in cell.get("outputs", [])]
    return f"{figure.source}, cell {i} (its code has {figure.cell!r})", squeeze("\n".join("".join(t) for t in texts))


def agrees(quoted: str, shown: float | str) -> bool:
    """Whether the quoted number is the shown one, rounded to as many decimals as the quote has."""
    try:
        q, s = Decimal(quoted.replace(",", "")), Decimal(str(shown).replace(",", ""))
    except InvalidOperation:
        return quoted == str(shown)
    return s.quantize(q, rounding=ROUND_HALF_UP) == q


def problems(figure: Figure, root: Path = ROOT) -> list[str]:
    """What disagrees, each saying which file, which figure, the quoted text and the output it comes from."""
    quoted = list(pattern(figure.quote).finditer(doc_text(root, figure.doc)))
    if not quoted:
        return [f"{figure.doc} no longer says {figure.quote!r}: if the text was reworded, update this row of "
                f"tests/test_docs_figures.py FIGURES (or drop it if the figure is gone)"]
    try:
        where, text = output_text(root, figure)
    except LookupError as err:
        return [str(err)]
    shown = pattern(figure.shown).search(text)
    if shown is None:
        return [f"{where} does not show {figure.shown!r} any more (its output reads: {text[:400]!r}): fix the "
                f"row's `shown` to the output's new wording"]
    values: dict[str, float | str] = {k: v for k, v in shown.groupdict().items()}
    numbers = {k: float(v.replace(",", "")) for k, v in shown.groupdict().items()}
    values.update({k: f(numbers) for k, f in figure.derive.items()})
    found = []
    for match in quoted:
        for group, quote in match.groupdict().items():
            name = group.split("__")[0]
            if name not in values:
                found.append(f"{figure.doc}: the quote's {{{name}}} is neither shown nor derived: fix the row")
            elif not agrees(quote, values[name]):
                found.append(f"{figure.doc} quotes {name} = {quote} in {match.group(0)!r}, but {where} shows "
                             f"{values[name]} in {shown.group(0)!r}")
    return found


@pytest.mark.parametrize("figure", FIGURES, ids=[f.id for f in FIGURES])
def test_a_quoted_figure_is_what_its_source_shows(figure):
    found = problems(figure)
    assert not found, "\n".join(found)


def test_the_docs_count_the_course_s_tasks():
    from minicb.course import TASKS

    workshop, readme = (ROOT / WORKSHOP).read_text(), (ROOT / "README.md").read_text()
    assert f"`make progress` ends with `0 of {len(TASKS)} tasks done`" in workshop, (
        f"{WORKSHOP}: a fresh `make progress` ends with '0 of {len(TASKS)} tasks done' (minicb.course.TASKS)")
    assert f"`4 of {len(TASKS)} tasks done`" in readme, f"README.md: the example count must be out of {len(TASKS)}"
    rows = re.findall(r"^\| (\d\d\.\d) \|", workshop, flags=re.M)
    assert rows == [f"{t.lesson:02d}.{t.number}" for t in TASKS], (
        f"{WORKSHOP}'s task table lists {rows}, minicb.course.TASKS has every task in order: add the missing rows")


def test_a_figure_that_drifted_fails_naming_the_file_the_figure_and_the_output(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "X.md").write_text("A small pool caused 85\npreemptions, p99 1.7 s.\n")
    cell = {"cell_type": "code", "source": ["rows = run()  # the tail\n"], "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["86 blocks   477 preemptions\n", "p99 1.74 s\n"]}]}
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["# n"]}, cell]}))
    row = Figure("docs/X.md", "caused {pre} preemptions, p99 {p99} s", "n.ipynb", "# the tail",
                 "86 blocks {pre} preemptions p99 {p99} s")
    assert problems(row, tmp_path) == [
        "docs/X.md quotes pre = 85 in 'caused 85 preemptions, p99 1.7 s', but n.ipynb, cell 1 (its code has "
        "'# the tail') shows 477 in '86 blocks 477 preemptions p99 1.74 s'"], "1.7 rounds 1.74: only 85 is wrong"
    reworded = Figure("docs/X.md", "led to {pre} preemptions", "n.ipynb", "# the tail", "86 blocks {pre} preemptions")
    assert "no longer says 'led to {pre} preemptions'" in problems(reworded, tmp_path)[0]
    lost = Figure("docs/X.md", "caused {pre} preemptions", "n.ipynb", "# the tail", "{pre} victims")
    assert "does not show '{pre} victims' any more" in problems(lost, tmp_path)[0]
    nowhere = Figure("docs/X.md", "caused {pre} preemptions", "n.ipynb", "# no such cell", "{pre} preemptions")
    assert "0 code cells of n.ipynb contain '# no such cell'" in problems(nowhere, tmp_path)[0]
