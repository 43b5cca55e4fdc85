"""Predictions: recorded before the run, judged against the measurement, counted per lesson, folded in the workspace."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from minicb.course import predictions
from minicb.course.predictions import PREDICTIONS, Prediction, answer_text, lesson_counts, predict, record, reveal
from minicb.course.progress import render_predictions
from minicb.course.workspace import clean_notebook

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_of(key: str) -> dict:
    """Of notebooks/{lesson}_*.ipynb (a lesson and its appendix), the one whose code asks for prediction `key`."""
    notebooks = [json.loads(path.read_text()) for path in NOTEBOOKS.glob(f"{key.split('.')[0]}_*.ipynb")]
    (notebook,) = [nb for nb in notebooks
                   if any(f'course.predict("{key}"' in "".join(c["source"]) for c in nb["cells"])]
    return notebook


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "predictions.json"
    monkeypatch.setenv(predictions.STORE_VARIABLE, str(path))
    return path


@pytest.mark.parametrize("key", sorted(PREDICTIONS))
def test_each_prediction_is_asked_after_its_prompt_revealed_after_its_run_and_answered_last(key):
    cells = notebook_of(key)["cells"]
    source = ["".join(c["source"]) for c in cells]
    asked = next(i for i, s in enumerate(source) if f'course.predict("{key}"' in s)
    revealed = next(i for i, s in enumerate(source) if f'course.reveal("{key}"' in s)
    answered = next(i for i, c in enumerate(cells) if f"answer:{key}" in c["metadata"].get("tags", []))
    assert cells[asked - 1]["cell_type"] == "markdown" and "Predict" in source[asked - 1]
    assert asked < revealed < answered, (asked, revealed, answered)
    measured = [i for i in range(asked + 1, revealed) if cells[i]["cell_type"] == "code"]
    assert measured, f"{key}: no cell measures anything between the prediction and its reveal"
    assert "<details>" in source[answered]


def test_every_lesson_from_01_asks_for_at_least_three_predictions_once_converted():
    per_lesson = {lesson: asked for lesson, (asked, _, _) in lesson_counts({}).items() if lesson != "00"}
    assert per_lesson and all(asked >= 3 for asked in per_lesson.values()), per_lesson


def test_a_choice_is_right_when_it_is_the_option_nearest_the_measurement():
    p = Prediction({"a": 0.9, "b": 0.55, "c": 0.3}, unit="%")
    assert p.judge("c", 0.28) and not p.judge("b", 0.28) and p.judge("b", 0.5) and not p.judge("c", 0.9)


def test_a_number_is_right_within_its_band_either_way():
    p = Prediction(unit="steps", tolerance=0.25)
    assert p.judge(30, 24) and p.judge(18, 24) and not p.judge(31, 24) and not p.judge(17, 24)


def test_options_a_factor_apart_are_judged_on_a_log_scale():
    p = Prediction({"a": 1.0, "b": 3.0, "c": 30.0}, unit="×", log=True)
    assert p.judge("b", 2.0) and p.judge("b", 9.0) and p.judge("c", 10.0) and p.judge("a", 0.0)   # 10 is 3x from 30
    assert not Prediction({"a": 1.0, "b": 3.0, "c": 30.0}).judge("c", 10.0)   # linearly, 10 is nearer 3
    assert p.describe("c") == "(c) about 30×" and p.format(2.46) == "2.5×" and p.format(17.33) == "17×"


def test_a_categorical_answer_is_right_when_it_is_the_letter_measured():
    p = Prediction({"a": "exactly 0", "b": "[94, 95, 144]", "c": "most of them"})
    assert p.categorical and not Prediction({"a": 0.5}).categorical
    assert p.judge("b", "b") and not p.judge("a", "b")
    assert p.judge("b", "[94, 95, 144]") and not p.judge("c", "[94, 95, 144]")   # the option's words name it too
    assert p.describe("b") == "(b) [94, 95, 144]"
    with pytest.raises(ValueError, match="none of the options"):
        p.judge("a", "[1, 2, 3]")


def test_a_categorical_reveal_shows_and_keeps_the_letter_of_what_happened(store, capsys, monkeypatch):
    monkeypatch.setitem(PREDICTIONS, "99.kind", Prediction({"a": "with B's", "b": "after its own tokens"}))
    predict("99.kind", "a")
    assert "Recorded: (a) with B's" in capsys.readouterr().out
    assert reveal("99.kind", "after its own tokens") is False
    assert "You said (a) with B's; measured (b) after its own tokens: not this time." in capsys.readouterr().out
    assert json.loads(store.read_text())["99.kind"] == {"answer": "a", "measured": "b", "right": False}


def test_a_prediction_and_its_reveal_are_kept_and_counted(store, capsys):
    predict("01.static_utilization", "c")
    assert "Recorded: (c) about 30%" in capsys.readouterr().out
    assert reveal("01.static_utilization", 0.28) is True
    assert "You said (c) about 30%; measured 28%: right" in capsys.readouterr().out
    predict("01.uniform_utilization", "a")
    assert reveal("01.uniform_utilization", 0.58) is False
    assert "not this time" in capsys.readouterr().out
    records = json.loads(store.read_text())
    assert records["01.static_utilization"] == {"answer": "c", "measured": 0.28, "right": True}
    predict("01.padding_share", "c")
    assert reveal("01.padding_share", np.float32(0.5)) is True   # a numpy scalar is stored as a number
    assert json.loads(store.read_text())["01.padding_share"]["measured"] == 0.5
    assert lesson_counts(json.loads(store.read_text()))["01"] == (3, 3, 2)


def test_no_prediction_is_said_and_only_the_measurement_kept(store, capsys):
    predict("01.padding_share", ...)
    assert "Not answered yet: replace ... with one of 'a', 'b', 'c'" in capsys.readouterr().out
    assert reveal("01.padding_share", 0.52) is None
    assert "no prediction" in capsys.readouterr().out
    assert json.loads(store.read_text()) == {"01.padding_share": {"measured": 0.52}}   # for lesson 11's rubric
    assert lesson_counts(json.loads(store.read_text()))["01"] == (3, 0, 0)
    record("02.fixed_step_gain", np.float64(1.0))
    assert json.loads(store.read_text())["02.fixed_step_gain"] == {"measured": 1.0}
    with pytest.raises(KeyError, match="no measured figure is named"):
        record("02.heavy_step_gain", 2.5)


@pytest.mark.parametrize("answer,fix", [("d", "one of 'a', 'b', 'c'"), (0.3, "one of 'a', 'b', 'c'")])
def test_a_bad_answer_is_refused_with_the_fix(store, answer, fix):
    with pytest.raises(ValueError, match=re.escape(fix)):
        predict("01.static_utilization", answer)
    with pytest.raises(KeyError, match="no prediction is named"):
        predict("01.no_such_thing", "a")


def test_progress_counts_the_workspaces_predictions(tmp_path):
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / predictions.STORE_NAME).write_text(json.dumps(
        {"01.static_utilization": {"answer": "c", "measured": 0.28, "right": True},
         "01.padding_share": {"answer": "a"}}))
    assert "lesson 01  2 of 3 made, 1 right" in render_predictions(tmp_path)


@pytest.mark.parametrize("key", sorted(PREDICTIONS))
def test_the_workspace_folds_each_answer_away_and_reveal_has_it_unfolded(key):
    stored = notebook_of(key)
    clean = json.loads(clean_notebook(json.dumps(stored)))
    text = answer_text(key)
    assert text.startswith("**The answer.**") and "<details>" not in text
    assert not any(f"answer:{key}" in c["metadata"].get("tags", []) for c in clean["cells"])
    assert len(clean["cells"]) == len(stored["cells"]) - sum(
        any(t.startswith("answer:") or t == "still" for t in c["metadata"].get("tags", [])) for c in stored["cells"])
