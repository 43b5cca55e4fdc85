"""Predictions: the learner commits to an answer before a cell measures it, and sees the two side by side.

A lesson's "Predict, then run" prompt is followed by a cell that records the learner's answer,
`course.predict("01.static_utilization", "c")`, and the measuring cell ends with
`course.reveal("01.static_utilization", measured)`, which prints "you said (c) about 30%; measured 28%: right".
A multiple-choice answer is right when its option is the one nearest the measured value (so the verdict
follows the measurement on any machine or model); a number, when it falls within the prediction's band.
Where the outcome is a kind, not a number ("A's stream ends first"), the options are words and the measuring
cell says which one happened: the answer is right when it is that letter.
Either way the lesson's answer, with its reason, follows: in the workspace (minicb.course.workspace) it
stays folded away until a prediction is recorded, and reveal shows it then.

Predictions made in workspace/ are kept in workspace/.predictions.json, never in the repository, and
`make progress` counts them per lesson. Anywhere else (notebooks/, under nbval) they last as long as the
kernel, so the stored outputs stay the same on every machine.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from minicb.course.checkout import REPO_ROOT

STORE_VARIABLE = "MINICB_PREDICTIONS"   # a file to keep predictions in, wherever the notebook runs (tests)
STORE_NAME = ".predictions.json"
WORKSPACE = "workspace"   # the learner's copies of the lessons, beside notebooks/ (minicb.course.workspace)
WORKSPACE_MANIFEST = ".upstream.json"   # in a workspace: what each copy was given (minicb.course.workspace)


@dataclass(frozen=True)
class Prediction:
    """One Predict prompt (its words are the lesson's): how an answer prints and when it counts as right."""
    # multiple choice: letter -> the value it stands for; or, where every option is words, the kind of outcome it
    # names (a categorical prediction: the cell measures which letter happened, or the words of its option)
    options: dict[str, float | str] = field(default_factory=dict)
    unit: str = ""            # how a value prints: "%" (a fraction in percent), "×" (a ratio), or a word after it
    tolerance: float = 0.25   # a number is right within this share of the measured value, either way
    log: bool = False         # options a factor apart (1×, 3×, 30×): nearest on a log scale, as the options are read

    @property
    def categorical(self) -> bool:
        return bool(self.options) and all(isinstance(value, str) for value in self.options.values())

    def describe(self, value: float | str) -> str:
        if isinstance(value, str):
            option = self.options[value]
            return f"({value}) {option}" if isinstance(option, str) else f"({value}) about {self.format(option)}"
        return self.format(value)

    def format(self, value: float) -> str:
        if self.unit == "%":
            return f"{value:.0%}"
        if self.unit == "×":
            return f"{value:.2g}×" if abs(value) < 100 else f"{value:.0f}×"
        return f"{value:g} {self.unit}".strip()

    def outcome(self, measured: object) -> str:
        """The letter a categorical measurement is: given as the letter, or as its option's words."""
        if isinstance(measured, str) and measured in self.options:
            return measured
        named = [letter for letter, words in self.options.items() if words == measured]
        if not named:
            raise ValueError(f"the measured outcome {measured!r} is none of the options "
                             f"{', '.join(f'({k}) {v}' for k, v in self.options.items())}")
        return named[0]

    def judge(self, answer: float | str, measured: float | str) -> bool:
        if self.categorical:
            return answer == self.outcome(measured)
        if self.options:
            def distance(letter: str) -> float:
                value = self.options[letter]
                if self.log:   # a measured 0 or less is nearest the smallest option
                    return abs(math.log(value) - math.log(max(measured, 1e-300)))
                return abs(value - measured)
            return answer == min(self.options, key=distance)
        return abs(float(answer) - measured) <= self.tolerance * abs(measured)

    def check_answer(self, key: str, answer: object) -> float | str:
        if self.options:
            if answer not in self.options:
                raise ValueError(f"course.predict({key!r}, ...): answer with one of "
                                 f"{', '.join(repr(o) for o in self.options)}, not {answer!r}")
            return answer
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
            raise ValueError(f"course.predict({key!r}, ...): answer with a number"
                             f"{' (a share: 0.3 for 30%)' if self.unit == '%' else ''}, not {answer!r}")
        return answer


PREDICTIONS: dict[str, Prediction] = {
    "00.smollm2_batch_gain": Prediction({"a": 2, "b": 10, "c": 60}, unit="×", log=True),
    "01.static_utilization": Prediction({"a": 0.9, "b": 0.55, "c": 0.3}, unit="%"),
    "01.uniform_utilization": Prediction({"a": 0.9, "b": 0.55, "c": 0.2}, unit="%"),
    "01.padding_share": Prediction({"a": 0.1, "b": 0.3, "c": 0.5}, unit="%"),
    "02.six_requests_steps": Prediction({"a": 24, "b": 34, "c": 48}, unit="steps"),
    "02.natural_steps": Prediction({"a": 330, "b": 205, "c": 95}, unit="steps"),
    "02.heavy_step_gain": Prediction({"a": 1.2, "b": 2.5, "c": 10}, unit="×", log=True),
    "03.z_slots": Prediction({"a": "[94, 95, 96]", "b": "[94, 95, 144]", "c": "[14, 15, 16]"}),
    "03.bitwise_drift": Prediction({"a": "exactly 0", "b": "around 1e-5", "c": "around 0.1"}),
    "03.greedy_differ": Prediction({"a": "none", "b": "2 to 5", "c": "most of them"}),
    "04.contiguous_share": Prediction({"a": 0.7, "b": 0.3, "c": 0.05}, unit="%"),
    "04.fewer_steps": Prediction({"a": 0.75, "b": 0.5, "c": 0.2}, unit="%"),
    "04.preemptions": Prediction({"a": 1, "b": 10, "c": 50}, log=True),
    "05.loop_speedup": Prediction({"a": 1, "b": 3, "c": 30}, unit="×", log=True),
    "05.tiles_computed": Prediction({"a": 6, "b": 9, "c": 11}, unit="tiles"),
    "05.rescales": Prediction({"a": "never", "b": "at one of the two later tiles", "c": "at both"}),
    "06.preemptions": Prediction({"a": 1, "b": 10, "c": 50}, unit="preemptions", log=True),
    "06.auto_swaps": Prediction({"a": "none: every victim is still short", "b": "some, not all", "c": "all of them"}),
    "06.swap_preemptions": Prediction({"a": "fewer times", "b": "as many times", "c": "more times"}),
    "06b.swap_from": Prediction({"a": "never: recompute always wins", "b": "from about 1,000 tokens",
                                 "c": "from about 100 tokens", "d": "from 0 tokens: swap always wins"}),
    "06b.worst_slowdown": Prediction({"a": 1.2, "b": 2, "c": 5}, unit="×", log=True),
    "06b.best_seats": Prediction({"a": 16, "b": 32, "c": 64}, unit="seats", log=True),
    "07.first_token_p99": Prediction({"a": "lower", "b": "about the same", "c": "higher"}),
    "07.gap_spread": Prediction({"a": 1, "b": 2, "c": 6}, unit="×", log=True),
    "07.chunked_itl": Prediction({"a": 150, "b": 30, "c": 10}, unit="ms", log=True),
    "07b.on_time": Prediction({"a": 900, "b": 600, "c": 300}, unit="of 1,000 on time"),
    "07b.others_wait": Prediction({"a": 1.0, "b": 1.25, "c": 2.0}, unit="×", log=True),
    "07b.default_itl": Prediction({"a": 40, "b": 130, "c": 500}, unit="ms", log=True),
    "08.latency_tail": Prediction({"a": 1.5, "b": 5, "c": 15}, unit="×", log=True),
    "08.chat_gain": Prediction({"a": 1.0, "b": 1.5, "c": 5}, unit="×", log=True),
    "08.goodput_peak": Prediction({"a": "50, the highest rate", "b": "40, just before the knee",
                                   "c": "30 or below, well before the knee"}),
    "09.short_stream": Prediction({"a": "with B's, when the batch is done",
                                   "b": "after its own 8 tokens, while B goes on", "c": "only after B"}),
    "09.knee": Prediction({"a": "output tokens per second", "b": "p99 TTFT"}),
    "09.hang_up": Prediction({"a": "its 400 tokens are generated anyway", "b": "aborted, its KV blocks free",
                              "c": "aborted, its KV blocks still in use"}),
    "10.prefilled_share": Prediction({"a": 0.9, "b": 0.5, "c": 0.1}, unit="%"),
    "09.real_model_itl": Prediction({"a": 2, "b": 15, "c": 100}, unit="×", log=True),
    "10.running_at_once": Prediction({"a": 4, "b": 8, "c": 16}, unit="at once", log=True),
    "10.hit_rate_fall": Prediction({"a": "gradually, block by block", "b": "all at once"}),
}


# Figures a lesson measures without asking for a prediction, which lesson 11's rubric quotes: key -> how it prints.
MEASURED: dict[str, Prediction] = {
    "02.fixed_step_gain": Prediction(unit="×"),
    "03.padded_refill_share": Prediction(unit="%"),
}


def record(key: str, measured: float) -> None:
    """Keep a figure the lesson measured (one of MEASURED), for lesson 11's rubric; it prints nothing."""
    if key not in MEASURED:
        raise KeyError(f"no measured figure is named {key!r}; the lessons' are {', '.join(MEASURED)}")
    records = load()
    records[key] = {"measured": measured.item() if hasattr(measured, "item") else measured}
    save(records)


def store_path() -> Path | None:
    """Where predictions are kept: MINICB_PREDICTIONS, or workspace/.predictions.json for a notebook that runs
    in the workspace; None elsewhere (they last as long as the kernel)."""
    if os.environ.get(STORE_VARIABLE):
        return Path(os.environ[STORE_VARIABLE])
    return Path.cwd() / STORE_NAME if in_workspace() else None


def workspace_store(root: Path) -> Path:
    """The predictions made in the workspace of the checkout at `root`."""
    return root / WORKSPACE / STORE_NAME


_session: dict[str, dict] = {}


def read(path: Path | None, session: dict[str, dict]) -> dict[str, dict]:
    """The records in `path`; with no path, those kept in `session` (the kernel's memory)."""
    if path is None:
        return dict(session)
    return json.loads(path.read_text()) if path.exists() else {}


def write(records: dict[str, dict], path: Path | None, session: dict[str, dict]) -> None:
    if path is None:
        session.clear()
        session.update(records)
    else:
        path.write_text(json.dumps(records, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def load(path: Path | None = None) -> dict[str, dict]:
    """key -> {"answer": ..., and once revealed "measured" and "right"}; {"measured": ...} alone where the
    learner made no prediction, or for a figure of MEASURED."""
    return read(path or store_path(), _session)


def save(records: dict[str, dict]) -> None:
    write(records, store_path(), _session)


def spec(key: str) -> Prediction:
    if key not in PREDICTIONS:
        raise KeyError(f"no prediction is named {key!r}; the lessons' are {', '.join(PREDICTIONS)}")
    return PREDICTIONS[key]


def predict(key: str, answer: object = ...) -> None:
    """Record your answer to the Predict prompt `key` (replace ... with it) before running the next cell."""
    prediction = spec(key)
    if answer is ...:
        choices = f"one of {', '.join(repr(o) for o in prediction.options)}" if prediction.options else "a number"
        print(f"Not answered yet: replace ... with {choices}, and run this cell before the next one.")
        return
    records = load()
    records[key] = {"answer": prediction.check_answer(key, answer)}
    save(records)
    print(f"Recorded: {prediction.describe(records[key]['answer'])}. Now run the next cell.")


def reveal(key: str, measured: float | str) -> bool | None:
    """Your prediction beside the measured value (for a categorical one, the letter of what happened, or its
    option's words), and whether it held (None: you made none)."""
    prediction = spec(key)
    if hasattr(measured, "item"):   # a numpy or torch scalar: kept as the Python number, which JSON can store
        measured = measured.item()
    if prediction.categorical:   # kept and shown as the letter of what happened
        measured = prediction.outcome(measured)
    shown = prediction.describe(measured) if prediction.categorical else prediction.format(measured)
    records = load()
    if "answer" not in records.get(key, {}):   # still kept: lesson 11's rubric quotes what you measured
        records[key] = {"measured": measured}
        save(records)
        print(f"Measured: {shown}. You made no prediction for this one: next time, answer the "
              f"course.predict cell under the prompt first.")
        return None
    answer = records[key]["answer"]
    right = prediction.judge(answer, measured)
    records[key].update(measured=measured, right=right)
    save(records)
    verdict = "right" if right else "not this time"
    if not prediction.options:
        verdict += f" (within {prediction.tolerance:.0%} counts)"
    print(f"You said {prediction.describe(answer)}; measured {shown}: {verdict}.")
    if in_workspace():   # the answer cell was folded away from this copy: it comes now, with its reason
        from IPython.display import Markdown, display
        display(Markdown(answer_text(key)))
    return right


ANSWER_TAG = "answer:"   # a markdown cell tagged "answer:<key>" holds the answer to that prediction


def answer_text(key: str, notebooks: Path = REPO_ROOT / "notebooks") -> str:
    """The lesson's answer to prediction `key`: its tagged markdown cell in notebooks/, without the fold."""
    lesson = key.split(".")[0]
    for path in sorted(notebooks.glob(f"{lesson}_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if ANSWER_TAG + key in cell.get("metadata", {}).get("tags", []):
                text = "".join(cell["source"])
                return text.replace("<details><summary>Answer</summary>", "**The answer.**").replace("</details>", "")
    raise KeyError(f"no cell of notebooks/{lesson}_*.ipynb is tagged {ANSWER_TAG + key!r}")


def in_workspace() -> bool:
    """Whether the notebook runs in a learner's workspace: a folder named workspace that minicb.course.workspace
    made (the checkout's, or another one made with --workspace, as the browser test's)."""
    here = Path.cwd()
    return here.name == WORKSPACE and (here / WORKSPACE_MANIFEST).is_file()


def lesson_counts(records: dict[str, dict]) -> dict[str, tuple[int, int, int]]:
    """lesson ("01", ..., "06b", as its notebook's name begins) -> (predictions it asks for, predictions made,
    predictions right)."""
    counts = {}
    for key in PREDICTIONS:
        lesson = key.split(".")[0]
        asked, made, right = counts.get(lesson, (0, 0, 0))
        record = records.get(key)
        made_one = record is not None and "answer" in record
        counts[lesson] = (asked + 1, made + made_one, right + bool(made_one and record.get("right")))
    return counts
