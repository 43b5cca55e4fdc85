"""`make lab`'s workspace: clean copies of the lessons that never spoil a prediction and never lose an edit."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from minicb.course.workspace import UPDATED_SUFFIX, is_answer, is_still, lesson_files, make_workspace

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = lesson_files(NOTEBOOKS)


def cells_after_predict_prompts(notebook: dict) -> list[dict]:
    """Every code cell that follows a markdown cell with a Predict prompt, up to the next markdown cell."""
    found, after_prompt = [], False
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            after_prompt = "Predict" in "".join(cell["source"])
        elif after_prompt:
            found.append(cell)
    return found


def test_the_stored_lessons_answer_their_predictions_so_the_workspace_is_needed():
    answered = [lesson.name for lesson in LESSONS
                if any(cell["outputs"] for cell in cells_after_predict_prompts(json.loads(lesson.read_text())))]
    assert len(answered) >= 8, answered


def test_no_cell_after_a_predict_prompt_has_an_output_in_the_workspace(tmp_path):
    subprocess.run([sys.executable, "-m", "minicb.course.workspace", "--notebooks", str(NOTEBOOKS),
                    "--workspace", str(tmp_path / "workspace")], check=True, capture_output=True)
    copies = sorted((tmp_path / "workspace").glob("*.ipynb"))
    assert [c.name for c in copies] == [lesson.name for lesson in LESSONS]
    for copy, lesson in zip(copies, LESSONS):
        clean, stored = json.loads(copy.read_text()), json.loads(lesson.read_text())
        kept = [c["source"] for c in stored["cells"] if not is_answer(c) and not is_still(c)]
        assert [c["source"] for c in clean["cells"]] == kept, copy.name
        assert cells_after_predict_prompts(clean) or copy.name.startswith(("00_", "11_")), f"{copy.name}: no Predict prompt"
        for cell in clean["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, (copy.name, cell["source"][:2])
        assert "widgets" not in clean["metadata"]


def test_a_still_left_out_of_the_workspace_follows_the_widget_it_pictures():
    """The workspace drops a widget's still picture, so the widget must be right above it: nothing else is lost."""
    stills = 0
    for lesson in LESSONS:
        cells = json.loads(lesson.read_text())["cells"]
        for i, cell in enumerate(cells):
            if is_still(cell):
                stills += 1
                above = "".join(cells[i - 1]["source"])
                assert re.search(r"^(SeatOccupancy|KVBlockMap|Timeline)\(", above, re.MULTILINE), (lesson.name, i)
    assert stills >= 6


def test_a_second_run_keeps_the_learners_edit_and_offers_an_upstream_change_beside_it(tmp_path):
    notebooks, workspace = tmp_path / "notebooks", tmp_path / "workspace"
    notebooks.mkdir()
    for lesson in LESSONS[:3]:
        shutil.copy(lesson, notebooks)
    first = make_workspace(notebooks, workspace)
    assert first.created == tuple(lesson.name for lesson in LESSONS[:3])
    edited, untouched, unchanged = (workspace / lesson.name for lesson in LESSONS[:3])

    mine = json.loads(edited.read_text())
    mine["cells"][0]["source"] = ["my notes\n"]
    edited.write_text(json.dumps(mine))
    second = make_workspace(notebooks, workspace)
    assert (second.created, second.refreshed, second.offered) == ((), (), ())
    assert json.loads(edited.read_text())["cells"][0]["source"] == ["my notes\n"]

    for lesson in LESSONS[:2]:   # both change upstream, as after a git pull
        upstream = json.loads((notebooks / lesson.name).read_text())
        upstream["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["new upstream cell\n"]})
        (notebooks / lesson.name).write_text(json.dumps(upstream))
    unchanged_before = unchanged.read_text()
    third = make_workspace(notebooks, workspace)
    assert third.offered == (edited.name,) and third.refreshed == (untouched.name,)
    assert json.loads(edited.read_text())["cells"][0]["source"] == ["my notes\n"]
    offer = workspace / (edited.stem + UPDATED_SUFFIX)
    assert json.loads(offer.read_text())["cells"][-1]["source"] == ["new upstream cell\n"]
    assert json.loads(untouched.read_text())["cells"][-1]["source"] == ["new upstream cell\n"]
    assert unchanged.read_text() == unchanged_before
    assert "yours is kept" in third.summary() and offer.name in third.summary()
