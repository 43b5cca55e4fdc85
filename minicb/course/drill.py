"""Lesson 11, the interview drill: your answers, the rubric beside what you measured, and drills on paper.

Your answers and scores are kept beside your predictions (workspace/.drill.json), never in the repository;
outside the workspace they last as long as the kernel. The rubric quotes what the lessons you ran in the
workspace measured (minicb.course.predictions), and keeps the published figures apart.
"""
from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minicb.course import predictions
from minicb.course.predictions import MEASURED, PREDICTIONS, Prediction

STORE_NAME = ".drill.json"
WORDS_PER_MINUTE = 150   # a calm spoken pace
ANSWERS = {"cold_60s": ("your 60-second cold answer", 60), "cold_5min": ("your 5-minute cold answer", 300),
           "again": ("your second 5-minute answer", 300)}
SCORED = ("cold_5min", "again")
SCALE = "0: not said; 1: said; 2: said, with the reason or a number"


@dataclass(frozen=True)
class Point:
    """One point a strong answer makes, the figures you measured for it, and the published figure."""
    claim: str
    evidence: tuple[tuple[str, str], ...]   # (prediction or measured-figure key, what it measured)
    published: str   # a paper's or a blog's figure, with its source, or why there is none


RUBRIC = (
    Point("Static batching holds every seat until the batch's longest request ends. LLM output lengths vary "
          "widely, so most seat-steps are wasted, and a request that arrives waits for the whole batch.",
          (("01.static_utilization", "seat use of static batching, 8 seats, heavy-tailed lengths"),
           ("01.padding_share", "share of a padded batch's tokens that are padding (A-D)")),
          "None measured: the study card's worked example (lesson 01) uses 42 of 96 seat-steps, 44%."),
    Point("Iteration-level scheduling: the engine forms the batch again before every step. A finished request "
          "leaves and returns at once, and a waiting one takes its seat.",
          (("02.six_requests_steps", "steps for A-F on 4 seats (static: 24 for A-D alone)"),
           ("02.heavy_step_gain", "times fewer steps than static, heavy-tailed lengths, 16 seats")),
          "Orca: 36.9× the throughput of FasterTransformer at the same latency, GPT-3 175B (OSDI 2022, abstract)."),
    Point("Selective batching: the linear layers run on all the step's tokens as one flat matrix, without "
          "padding. Attention runs per sequence, over its own context.",
          (("03.padded_refill_share", "share of padding if each step's rows were padded instead"),
           ("05.loop_speedup", "one batched attention call against a loop over sequences")),
          "None alone: Orca (OSDI 2022) counts it within its 36.9×."),
    Point("The KV cache must be paged. Reserving each request's longest possible reply leaves memory empty "
          "but taken; blocks given out as tokens arrive let many more requests run.",
          (("04.contiguous_share", "share of reserved KV slots that held tokens, contiguous reservation"),
           ("04.fewer_steps", "fewer steps with paging than with contiguous reservation")),
          "PagedAttention: systems that reserve the maximum length kept tokens in only 20.4%-38.2% of their KV "
          "memory (Kwon et al., SOSP 2023, Figure 2)."),
    Point("The scheduling policy trades TTFT against TPOT. Prefill first gives new users their first token "
          "sooner; decode first keeps current streams smooth. Chunked prefill bounds the stall.",
          (("07.first_token_p99", "TTFT p99 of prefill first against decode first"),
           ("07.gap_spread", "a long reply's p99 gap over its mean gap"),
           ("07.chunked_itl", "decoders' ITL p99 with chunked prefill (ms)")),
          "No single figure: vLLM V1 schedules decodes first with chunked prefill on; SGLang runs prefill first "
          "(docs/FACTS.md, docs/CHEATSHEET.md)."),
    Point("When the KV pool runs out, a running request is preempted. Recompute drops its cache and prefills it "
          "again; swap copies it to CPU memory and back. Preemption makes the p99 tail.",
          (("06.preemptions", "preemptions with 16 blocks for ten replies"),
           ("06b.swap_from", "context length from which swap beats recompute on this CPU"),
           ("06b.worst_slowdown", "worst-hit preempted request's slowdown, 86 blocks")),
          "PagedAttention: recompute was never more than 20% slower than swap (SOSP 2023, §7.3); vLLM V1 "
          "only recomputes (PR #36216)."),
    Point("The published gains are large, but they depend on the workload (the spread of output lengths) and "
          "on the hardware.",
          (("08.chat_gain", "output tokens/s over static batching, heavy-tailed chat, simulated"),
           ("00.smollm2_batch_gain", "tokens/s of a 64-sequence step over a 1-sequence step, SmolLM2")),
          "Orca: 36.9× (OSDI 2022); vLLM: 2-4× over FasterTransformer and Orca (SOSP 2023, abstract); "
          "Anyscale: up to 23× with vLLM over static batching (blog, June 2023)."),
    Point("It does not help when every request wants the same number of tokens (classification, embeddings), "
          "and it does not make every token faster: the ITL jitters as the batch changes.",
          (("02.fixed_step_gain", "step gain with every reply 64 tokens long"),
           ("08.latency_tail", "e2e p99 over p50, chat at 40 requests/s")),
          "None measured: the study card says fixed-length tasks gain almost nothing."),
)


def _lesson(key: str) -> str:
    return key.split(".")[0]


def _store() -> Path | None:
    store = predictions.store_path()
    return store.with_name(STORE_NAME) if store else None


_session: dict[str, dict] = {}


def load(path: Path | None = None) -> dict[str, dict]:
    """"cold_60s", "cold_5min", "again" -> {"text", "words"}, and "score:<answer>" -> {"scores"}."""
    return predictions.read(path or _store(), _session)


def _save(records: dict[str, dict]) -> None:
    predictions.write(records, _store(), _session)


def ready() -> None:
    """How many of the figures the rubric quotes your runs have recorded, and which lessons to run first."""
    measured = predictions.load()
    keys = [key for point in RUBRIC for key, _ in point.evidence]
    have = [key for key in keys if "measured" in measured.get(key, {})]
    print(f"The rubric quotes {len(keys)} figures from your own runs; {len(have)} are recorded.")
    if missing := sorted({_lesson(key) for key in keys if key not in have}):
        print(f"Run lessons {', '.join(missing)} first, in your workspace (make workspace): their cells record "
              "what they measure. The rubric shows your numbers then.")


def answer(which: str, text: str) -> None:
    """Keep your answer (`which`: "cold_60s", "cold_5min" or "again")."""
    if which not in ANSWERS:
        raise ValueError(f"drill.answer: which is one of {', '.join(map(repr, ANSWERS))}, not {which!r}")
    label, seconds = ANSWERS[which]
    if not text.strip():
        print(f"Not answered yet: write {label} between the quotes, then run this cell.")
        return
    words = len(text.split())
    records = load()
    records[which] = {"text": text.strip(), "words": words}
    _save(records)
    spoken = round(words / WORDS_PER_MINUTE * 60)
    print(f"Kept {label}: {words} words, about {spoken} s spoken at {WORDS_PER_MINUTE} words a minute "
          f"(aim for {seconds} s).")


def _shown(key: str, record: dict) -> str:
    spec: Prediction = PREDICTIONS.get(key) or MEASURED[key]
    measured = record["measured"]
    return spec.describe(measured) if spec.categorical else spec.format(measured)


def rubric() -> None:
    """The rubric's points, each with what you measured and the published figure; after your cold answers."""
    records = load()
    if not all(which in records for which in ("cold_60s", "cold_5min")):
        print("The rubric comes after your cold answers: write the 60-second and the 5-minute answer above first.")
        return
    measured = predictions.load()
    for number, point in enumerate(RUBRIC, 1):
        print(textwrap.fill(point.claim, 100, initial_indent=f"{number}. ", subsequent_indent="   "))
        for key, what in point.evidence:
            record = measured.get(key, {})
            yours = _shown(key, record) if "measured" in record else f"not measured yet: run lesson {_lesson(key)}"
            print(f"     your run (lesson {_lesson(key)}): {what}: {yours}")
        print(textwrap.fill(f"published, not yours: {point.published}", 100, initial_indent=" " * 5,
                            subsequent_indent=" " * 7))
    print(f"\nScore your 5-minute answer on each point: {SCALE}.")


def score(which: str, scores: object = ...) -> None:
    """Keep your self-scores of an answer ("cold_5min" or "again"): one per rubric point, 0, 1 or 2."""
    if which not in SCORED:
        raise ValueError(f"drill.score: which is one of {', '.join(map(repr, SCORED))}, not {which!r}")
    if scores is ...:
        print(f"Not scored yet: put {len(RUBRIC)} scores in place of ..., one per rubric point ({SCALE}).")
        return
    if which not in load():
        raise ValueError(f"drill.score({which!r}, ...): write that answer first (drill.answer({which!r}, ...))")
    if (not isinstance(scores, (list, tuple)) or len(scores) != len(RUBRIC)
            or any(s not in (0, 1, 2) or isinstance(s, bool) for s in scores)):
        raise ValueError(f"drill.score: give {len(RUBRIC)} scores, each 0, 1 or 2 ({SCALE}), not {scores!r}")
    records = load()
    records[f"score:{which}"] = {"scores": list(scores)}
    _save(records)
    weak = [str(n) for n, s in enumerate(scores, 1) if s < 2]
    print(f"{sum(scores)} of {2 * len(RUBRIC)}." + (f" Points to work on: {', '.join(weak)}." if weak else ""))


def compare() -> None:
    """Your second answer's scores against your cold one's, and the predictions you missed, by lesson."""
    records = load()
    if not all(f"score:{which}" in records for which in SCORED):
        print("Score both answers first: drill.score('cold_5min', ...) and drill.score('again', ...).")
        return
    cold, again = (records[f"score:{which}"]["scores"] for which in SCORED)
    print(f"{'point':>5} {'cold':>5} {'again':>6}")
    for number, (point, before, after) in enumerate(zip(RUBRIC, cold, again), 1):
        lessons = sorted({_lesson(key) for key, _ in point.evidence})
        print(f"{number:5d} {before:5d} {after:6d}" + (f"   still to work on: lesson {', '.join(lessons)}"
                                                        if after < 2 else ""))
    print(f"total {sum(cold):5d} {sum(again):6d}   (of {2 * len(RUBRIC)})")
    missed = [(key, record) for key, record in sorted(predictions.load().items())
              if key in PREDICTIONS and "answer" in record and record.get("right") is False]
    for key, record in missed:
        spec = PREDICTIONS[key]
        print(f"Lesson {_lesson(key)}: you predicted {spec.describe(record['answer'])}, measured "
              f"{_shown(key, record)} ({key}): reread the answer under it.")
    if not missed:
        print("No prediction of yours missed (or none was checked in your workspace).")


SEAT_CHART_SEATS = 3
ARRIVALS = {"A": (0, 5), "B": (0, 2), "C": (0, 6), "D": (1, 3), "E": (1, 4), "F": (3, 2)}   # step it arrives by, tokens


def seat_chart() -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Each request's first and last step, and one row per seat, from minicb's simulated continuous engine."""
    from minicb.engine import LLMEngine
    from minicb.sampling import SamplingParams

    engine = LLMEngine(simulate=True, batching="continuous", max_num_seqs=SEAT_CHART_SEATS)
    step = 0
    while step == 0 or engine.has_unfinished_requests():
        for name, (arrives, tokens) in ARRIVALS.items():
            if arrives == step:
                engine.add_request([10, 11, 12], SamplingParams(max_tokens=tokens, ignore_eos=True), request_id=name)
        engine.step()
        step += 1
    steps = engine.trace.steps
    runs = {name: [i for i, s in enumerate(steps) if name in s.tokens] for name in ARRIVALS}
    look = {"prefill": str.upper, "decode": str.lower}
    rows = ["".join(look.get(phase, lambda _: ".")(rid or " ") if rid else " " for rid, phase in
                    (s.all_seats[seat] for s in steps)) for seat in range(SEAT_CHART_SEATS)]
    return {name: (run[0], run[-1]) for name, run in runs.items()}, rows


STATIC_LENGTHS = (3, 12, 5, 8)   # tokens each request of the static batch wants


def _static_utilization() -> float:
    return sum(STATIC_LENGTHS) / (len(STATIC_LENGTHS) * max(STATIC_LENGTHS))


@dataclass(frozen=True)
class PaperDrill:
    question: Callable[[], str]
    truth: Callable[[], object]
    judge: Callable[[object, object], str | None]   # (answer, truth) -> None when right, else what is off
    working: Callable[[object], str]


def _within(share: float, unit: str) -> Callable[[object, object], str | None]:
    def judge(answer: object, truth: object) -> str | None:
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return f"answer with a number ({unit}), not {answer!r}"
        return None if abs(answer - truth) <= share * truth else f"{answer:g} is more than {share:.0%} off"
    return judge


def _chart_judge(answer: object, truth: object) -> str | None:
    if not isinstance(answer, dict) or set(answer) != set(ARRIVALS):
        return f"answer with a dict of every request, {{'A': (first step, last step), ...}}, not {answer!r}"
    wrong = [name for name in ARRIVALS if tuple(answer[name]) != truth[name]]
    return f"{', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} off" if wrong else None


def _drills() -> dict[str, PaperDrill]:
    from minicb.lab.hardware import H100_SXM, LLAMA3_8B, RooflineCost

    ridge = RooflineCost(LLAMA3_8B, H100_SXM).ridge_point
    per_token, lengths = LLAMA3_8B.kv_bytes_per_token, STATIC_LENGTHS
    return {
        "static_utilization": PaperDrill(
            lambda: f"A static batch of {len(lengths)} seats runs requests that want {', '.join(map(str, lengths[:-1]))} "
                    f"and {lengths[-1]} tokens, one token a step. What share of its seat-steps does useful work? "
                    "(a share: 0.3 for 30%)",
            _static_utilization, _within(0.02, "a share"),
            lambda t: f"Useful seat-steps: {' + '.join(map(str, lengths))} = {sum(lengths)}. The batch holds "
                      f"{len(lengths)} seats for the longest, {max(lengths)} steps: {len(lengths) * max(lengths)}. "
                      f"{sum(lengths)} / {len(lengths) * max(lengths)} = {t:.0%}."),
        "kv_bytes": PaperDrill(
            lambda: f"{LLAMA3_8B.name} keeps K and V in {LLAMA3_8B.num_layers} layers, {LLAMA3_8B.num_kv_heads} KV "
                    f"heads of {LLAMA3_8B.head_dim} numbers, in bf16 (2 bytes). How many MB (10^6 bytes) of KV "
                    "cache does one sequence of 4,096 tokens hold?",
            lambda: per_token * 4096 / 1e6, _within(0.02, "MB"),
            lambda t: f"2 (K and V) × {LLAMA3_8B.num_layers} × {LLAMA3_8B.num_kv_heads} × {LLAMA3_8B.head_dim} × 2 "
                      f"bytes = {per_token:,} bytes a token; × 4,096 = {t:.0f} MB. Its {LLAMA3_8B.num_heads} query "
                      f"heads share {LLAMA3_8B.num_kv_heads} KV heads: without that, "
                      f"{LLAMA3_8B.num_heads // LLAMA3_8B.num_kv_heads}× as much."),
        "ridge": PaperDrill(
            lambda: f"{LLAMA3_8B.name} in bf16 decodes B sequences in one step. Count 2 FLOPs per weight per token "
                    "and one read of every weight; leave out attention and the KV cache. The H100's ridge point is "
                    f"{ridge:.0f} FLOP/byte (modelled, lesson 00). From about which B is the step no longer "
                    "memory-bound?",
            lambda: ridge, _within(0.1, "sequences"),
            lambda t: f"Each weight is read once (2 bytes) and used in 2 FLOPs per token: 2B FLOPs per 2 bytes, so "
                      f"B FLOP per byte. B must reach about {t:.0f}. The KV reads add bytes but no weight FLOPs, so "
                      f"a real step needs more: 256 sequences of 129 tokens reach only "
                      f"{LLAMA3_8B.arithmetic_intensity(256, 256 * 129):.1f} FLOP/byte."),
        "seat_chart": PaperDrill(
            lambda: f"Continuous batching, {SEAT_CHART_SEATS} seats, decode first, first come, first served. A "
                    "request's first step runs its prompt and gives its first token, then one token a step (as in "
                    "lesson 02). Requests (each in the line before the step named): "
                    + "; ".join(f"{n} by step {a}, {t} tokens" for n, (a, t) in ARRIVALS.items())
                    + ". Draw the seats step by step. Answer {'A': (first step, last step), ...}.",
            lambda: seat_chart()[0], _chart_judge,
            lambda t: "minicb's engine ran it (capital: prompt step, small: decode):\n" + "\n".join(
                f"seat {i} |{row}|" for i, row in enumerate(seat_chart()[1]))),
    }


SHOW = "show"   # the answer that asks for the working instead


def check(name: str, answer: object = ...) -> bool | None:
    """A drill on paper: its question, and once you answer, whether you are right (with the working, once right
    or on `answer="show"`)."""
    drills = _drills()
    if name not in drills:
        raise KeyError(f"drill.check: no drill is named {name!r}; they are {', '.join(drills)}")
    drill = drills[name]
    print(textwrap.fill(drill.question(), 100))
    if answer is ...:
        print("Not answered yet: work it out on paper, put your answer in place of ..., and run this cell again.")
        return None
    truth = drill.truth()
    if answer == SHOW:
        print(drill.working(truth))
        return None
    off = drill.judge(answer, truth)
    if off is None:
        print(f"Right. {drill.working(truth)}")
    else:
        print(f"Not yet: {off}. Try again, or answer {SHOW!r} to see the working.")
    return off is None


def state(root: Path) -> str:
    """Where the learner stands in the drill, in a line, for `make progress`."""
    records = load(root / predictions.WORKSPACE / STORE_NAME)

    def scored(which: str) -> str:
        scores = records.get(f"score:{which}", {}).get("scores")
        return f"self-scored {sum(scores)} of {2 * len(RUBRIC)}" if scores else "not self-scored yet"

    cold = all(which in records for which in ("cold_60s", "cold_5min"))
    return ("Interview drill (lesson 11): "
            + (f"answered cold, {scored('cold_5min')}" if cold else "not answered cold yet") + "; "
            + (f"answered again, {scored('again')}" if "again" in records else "not answered again yet"))
