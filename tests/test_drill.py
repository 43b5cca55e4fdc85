"""Lesson 11, the interview drill (minicb.course.drill): the rubric waits for the cold answers and quotes the
learner's own runs; scores are checked; the paper drills agree with independent references and refuse plausible
wrong answers; the lesson, run in two workspaces, shows each its own evidence."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest
import torch

from minicb.course import drill
from minicb.course.predictions import STORE_NAME, STORE_VARIABLE
from minicb.engine import LLMEngine
from minicb.lab.hardware import LLAMA3_8B
from minicb.sampling import SamplingParams
from test_notebooks_fresh import numbers_not_shown, source

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "notebooks" / "11_interview_drill.ipynb"
MAX_DRILL_WORDS = 3_500   # lesson 11's markdown, counted apart from lessons 00-10


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(STORE_VARIABLE, str(tmp_path / STORE_NAME))
    return tmp_path / STORE_NAME


def flat(text: str) -> str:
    """Printed text with its wrapping undone."""
    return " ".join(text.split())


def answer_both_cold(capsys) -> None:
    drill.answer("cold_60s", "Static batching holds seats; continuous batching refills them every step.")
    drill.answer("cold_5min", "A longer answer. " * 40)
    capsys.readouterr()


def test_the_rubric_waits_for_both_cold_answers(store, capsys):
    drill.rubric()
    drill.answer("cold_60s", "Static batching idles seats.")
    drill.rubric()
    drill.answer("cold_5min", "  \n ")
    drill.rubric()
    out = capsys.readouterr().out
    assert out.count("after your cold answers") == 3 and "Not answered yet" in out
    assert not any(point.claim in flat(out) for point in drill.RUBRIC)
    drill.answer("cold_5min", "word " * 750)
    assert "750 words, about 300 s spoken" in capsys.readouterr().out
    drill.rubric()
    out = flat(capsys.readouterr().out)
    assert all(point.claim in out and point.published in out for point in drill.RUBRIC)
    assert "not measured yet: run lesson 01" in out
    assert json.loads(store.with_name(drill.STORE_NAME).read_text())["cold_60s"]["words"] == 4


def test_the_rubric_quotes_what_your_runs_measured_and_keeps_the_published_apart(store, capsys):
    store.write_text(json.dumps({"01.static_utilization": {"answer": "a", "measured": 0.28, "right": False},
                                 "07.first_token_p99": {"measured": "c"}, "02.fixed_step_gain": {"measured": 1.0}}))
    drill.ready()
    keys = sum(len(point.evidence) for point in drill.RUBRIC)
    assert f"quotes {keys} figures from your own runs; 3 are recorded" in capsys.readouterr().out
    answer_both_cold(capsys)
    drill.rubric()
    out = flat(capsys.readouterr().out)
    assert "your run (lesson 01): seat use of static batching, 8 seats, heavy-tailed lengths: 28%" in out
    assert "prefill first against decode first: (c) higher" in out
    assert "every reply 64 tokens long: 1×" in out
    assert out.count("published, not yours:") == len(drill.RUBRIC)


def test_nothing_recorded_names_the_lessons_to_run_first(store, capsys):
    drill.ready()
    lessons = sorted({key.split(".")[0] for point in drill.RUBRIC for key, _ in point.evidence})
    assert f"Run lessons {', '.join(lessons)} first" in capsys.readouterr().out


@pytest.mark.parametrize("scores,rule", [([2] * 7, "give 8 scores"), ([3] + [0] * 7, "each 0, 1 or 2"),
                                         ([True] * 8, "each 0, 1 or 2"), ("22221111", "give 8 scores")])
def test_a_bad_score_is_refused_with_the_fix(store, capsys, scores, rule):
    with pytest.raises(ValueError, match="write that answer first"):
        drill.score("cold_5min", [1] * 8)
    answer_both_cold(capsys)
    with pytest.raises(ValueError, match=rule):
        drill.score("cold_5min", scores)


def test_the_second_answer_is_compared_with_the_cold_one_and_missed_predictions_point_to_their_lessons(store, capsys):
    store.write_text(json.dumps({"04.contiguous_share": {"answer": "a", "measured": 0.31, "right": False},
                                 "02.six_requests_steps": {"answer": "a", "measured": 24, "right": True}}))
    answer_both_cold(capsys)
    drill.score("cold_5min", [2, 1, 0, 0, 1, 0, 0, 0])
    assert "4 of 16. Points to work on: 2, 3, 4, 5, 6, 7, 8." in capsys.readouterr().out
    drill.compare()
    assert "Score both answers first" in capsys.readouterr().out
    drill.answer("again", "A better answer. " * 100)
    drill.score("again", [2, 2, 2, 2, 1, 2, 2, 2])
    drill.compare()
    out = capsys.readouterr().out
    assert re.search(r"^total\s+4\s+15", out, flags=re.M) and "still to work on: lesson 07" in out
    assert "Lesson 04: you predicted (a) about 70%, measured 31%" in out and "Lesson 02" not in out


def test_make_progress_says_where_you_stand_in_the_drill(tmp_path):
    (tmp_path / "workspace").mkdir()
    path = tmp_path / "workspace" / drill.STORE_NAME
    assert drill.state(tmp_path).endswith("not answered cold yet; not answered again yet")
    cold = {"cold_60s": {"text": "x", "words": 1}, "cold_5min": {"text": "y", "words": 1}}
    path.write_text(json.dumps(cold))
    assert drill.state(tmp_path).endswith("answered cold, not self-scored yet; not answered again yet")
    path.write_text(json.dumps({**cold, "score:cold_5min": {"scores": [1] * 8}, "again": {"text": "z", "words": 1},
                                "score:again": {"scores": [2] * 8}}))
    assert drill.state(tmp_path).endswith("answered cold, self-scored 8 of 16; answered again, self-scored 16 of 16")


def continuous_by_hand(seats: int, arrivals: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """An independent seat chart: decode first, first come, first served, a prompt step gives the first token."""
    line, running, runs, step = deque(), {}, {}, 0
    while step == 0 or line or running or any(at >= step for at, _ in arrivals.values()):
        line.extend(name for name, (at, _) in arrivals.items() if at == step)
        for name in list(running):
            running[name] -= 1
        while line and len(running) < seats:
            name = line.popleft()
            running[name] = arrivals[name][1] - 1
            runs[name] = [step]
        for name in list(running):
            runs[name].append(step)
            if running[name] == 0:
                del running[name]
        step += 1
    return {name: (run[0], run[-1]) for name, run in runs.items()}


def test_the_paper_drills_agree_with_independent_references():
    static = LLMEngine(simulate=True, batching="static", max_num_seqs=4)
    for n in (3, 12, 5, 8):
        static.add_request([10, 11], SamplingParams(max_tokens=n, ignore_eos=True))
    while static.has_unfinished_requests():
        static.step()
    drills = drill._drills()
    assert drills["static_utilization"].truth() == pytest.approx(static.trace.seat_utilization)
    kv = torch.empty(2, LLAMA3_8B.num_layers, 4096, LLAMA3_8B.num_kv_heads, LLAMA3_8B.head_dim, dtype=torch.bfloat16)
    assert drills["kv_bytes"].truth() == pytest.approx(kv.nbytes / 1e6)
    ridge = drills["ridge"].truth()
    assert LLAMA3_8B.arithmetic_intensity(round(ridge), 0) == pytest.approx(ridge, rel=0.02)
    assert drills["seat_chart"].truth() == continuous_by_hand(drill.SEAT_CHART_SEATS, drill.ARRIVALS)


def static_chart() -> dict[str, tuple[int, int]]:
    """A learner who runs the arrivals in static batches of 3: D, E and F start when C's batch is done."""
    return {"A": (0, 4), "B": (0, 1), "C": (0, 5), "D": (6, 8), "E": (6, 9), "F": (6, 7)}


@pytest.mark.parametrize("name,wrong", [
    ("static_utilization", 0.44),            # the card's worked example, not this batch
    ("static_utilization", 1 - 28 / 48),     # the waste, not the use
    ("static_utilization", 58),              # a percentage, not a share
    ("kv_bytes", 268.4),                     # K alone, or V alone
    ("kv_bytes", 2147.5),                    # one KV head per query head
    ("ridge", 110.8),                        # a byte per weight, or one FLOP per weight
    ("ridge", "221"),                        # words, not a number
    ("seat_chart", static_chart()),          # static batches
    ("seat_chart", {"A": (0, 4)}),           # not every request
])
def test_a_paper_drill_refuses_a_plausible_wrong_answer_without_showing_the_working(capsys, name, wrong):
    assert drill.check(name, wrong) is False
    out = capsys.readouterr().out
    assert "Not yet:" in out and "Right" not in out and "minicb's engine ran it" not in out


def test_a_paper_drill_takes_the_right_answer_and_shows_the_working(capsys):
    truth = drill.seat_chart()[0]
    for name, right in (("static_utilization", 0.583), ("kv_bytes", 537), ("ridge", 221), ("seat_chart", truth)):
        assert drill.check(name, right) is True
    out = capsys.readouterr().out
    assert out.count("Right.") == 4 and "seat 0 |" in out
    assert drill.check("ridge", drill.SHOW) is None and "B FLOP per byte" in capsys.readouterr().out


def cells(path: Path = LESSON) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def shown_by_the_lessons() -> str:
    """Markdown and stored outputs of lessons 00-10, and docs/FACTS.md: where a model answer's numbers come from."""
    texts = [(ROOT / "docs" / "FACTS.md").read_text()]
    for path in sorted((ROOT / "notebooks").glob("[01]*.ipynb")):
        if path != LESSON:
            lesson = cells(path)
            texts += [source(c) for c in lesson] + ["".join(o.get("text", "")) for c in lesson
                                                    for o in c.get("outputs", [])]
    return " ".join(texts).replace(",", "")


def test_follow_ups_and_wrong_answers_are_folded_and_quote_the_courses_numbers():
    follow_ups = [source(c) for c in cells() if source(c).startswith("**Follow-up")]
    wrong = [source(c) for c in cells() if source(c).startswith('**"')]
    assert len(follow_ups) >= 12 and len(wrong) == 3
    shown = shown_by_the_lessons()
    for text in follow_ups + wrong:
        question, folded = text.split("\n\n<details><summary>", 1)
        assert folded.startswith(("Model answer</summary>", "Why it is wrong</summary>")), question
        assert folded.rstrip().endswith("</details>"), question
        typed = numbers_not_shown(folded, shown)
        assert not typed, f"{question}: quotes numbers no lesson shows: {typed}"


def test_the_drill_fits_its_budget():
    words = sum(len(source(c).split()) for c in cells() if c["cell_type"] == "markdown")
    assert words <= MAX_DRILL_WORDS, f"lesson 11 holds {words:,} words of markdown, over {MAX_DRILL_WORDS:,}"


def run_in_workspace(folder: Path, measured: dict[str, dict], answered: bool) -> tuple[str, Path]:
    """Lesson 11 run top to bottom in a fresh workspace whose lessons recorded `measured`; `answered`: with both
    cold answers written. Returns every output's text, and the workspace."""
    from nbclient import NotebookClient

    workspace = folder / "workspace"
    subprocess.run([sys.executable, "-m", "minicb.course.workspace", "--notebooks", str(ROOT / "notebooks"),
                    "--workspace", str(workspace)], check=True, capture_output=True)
    (workspace / STORE_NAME).write_text(json.dumps(measured))
    notebook = json.loads((workspace / LESSON.name).read_text())
    for cell in notebook["cells"]:
        if answered and re.search(r'drill\.answer\("cold_', source(cell)):
            cell["source"] = source(cell).replace('"""\n\n"""', '"""Seats idle under static batching."""')
    import nbformat

    notebook = nbformat.reads(json.dumps(notebook), as_version=4)
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(workspace)}}).execute()
    return "\n".join("".join(o.get("text", "")) for c in notebook.cells for o in c.get("outputs", [])), workspace


def test_lesson_11_shows_each_workspace_its_own_evidence_and_nothing_before_the_cold_answer(tmp_path, monkeypatch):
    monkeypatch.delenv(STORE_VARIABLE, raising=False)
    blank, _ = run_in_workspace(tmp_path / "blank", {}, answered=False)
    assert "Run lessons 00, 01, 02" in blank and "after your cold answers" in blank
    assert not any(point.claim in flat(blank) or point.published in flat(blank) for point in drill.RUBRIC)
    first, workspace = run_in_workspace(tmp_path / "a", {"01.static_utilization": {"measured": 0.28},
                                                         "04.contiguous_share": {"measured": 0.31}}, answered=True)
    second, _ = run_in_workspace(tmp_path / "b", {"01.static_utilization": {"answer": "c", "measured": 0.19,
                                                                            "right": False}}, answered=True)
    assert all(point.claim in flat(first) and point.claim in flat(second) for point in drill.RUBRIC)
    assert "heavy-tailed lengths: 28%" in first and "held tokens, contiguous reservation: 31%" in first
    assert "heavy-tailed lengths: 19%" in second and "28%" not in second
    assert "contiguous reservation: not measured yet: run lesson 04" in second
    kept = json.loads((workspace / drill.STORE_NAME).read_text())
    assert kept["cold_60s"]["text"] == "Seats idle under static batching."
    assert not list((ROOT / "notebooks").glob(drill.STORE_NAME))
