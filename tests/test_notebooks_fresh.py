"""Static checks of the course notebooks as stored (fast; nothing is executed here).

Executing them is the job of nbval (`make test` runs `pytest tests notebooks --nbval --nbval-current-env`
with MINICB_IMPL=solutions) and of `python tools/check_notebooks.py`, which compares fresh outputs with
the stored ones. These tests check the stored files those runs and GitHub readers rely on:
- every code cell was run and stored (it has an execution count), and none stored an error;
- a cell that runs a learner's task (`course.attempt`) is tagged "yours" and stores no output: run under the
  reference, its output would be the task's answer, shown to a learner who opens this copy before trying;
- every cell that shows machine-dependent output (the clock, latencies, versions, the platform) or a
  widget starts with `# NBVAL_IGNORE_OUTPUT`, so that nbval does not compare it;
- every lesson has its title, "What you will learn", "What to remember", a recap of the lesson before
  (but lesson 00), a "**Next:**" line, and links only to notebooks that exist;
- every exercise a lesson names (`exercises/lessonNN_topic.py::symbol`) comes with its check command;
- every "Your turn" is followed by its folded answer key;
- no markdown cell runs past 250 words, tables and diagrams included.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
IGNORE = "# NBVAL_IGNORE_OUTPUT"
YOURS = "yours"

# What makes an output depend on the machine: the clock, versions, and interactive widgets. Simulated
# times (the simulator's clock) are deterministic, so throughput from `simulate=True` runs may be checked.
MACHINE_DEPENDENT = r"perf_counter|time\.time\(|\.duration\b|__version__|platform\.|ttft|e2e|queue_time|token_times"
WIDGETS = r"^(SeatOccupancy|KVBlockMap|Timeline|Playground)\(|ServerSeats\(|latency_cdf\("


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb files"


def runs_your_task(cell: dict) -> bool:
    return "course.attempt(" in source(cell)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_was_run_and_stored(path: Path):
    missing = [i for i, c in enumerate(code_cells(path)) if c.get("execution_count") is None and not runs_your_task(c)]
    assert not missing, (f"{path.name}: code cells {missing} have no stored outputs; store them with "
                         f"`python tools/check_notebooks.py --write notebooks/{path.name}`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_cell_that_runs_your_task_stores_no_answer(path: Path):
    cells = code_cells(path)
    untagged = [i for i, c in enumerate(cells) if runs_your_task(c)
                and not {YOURS, "nbval-ignore-output"} <= set(c.get("metadata", {}).get("tags", []))]
    stored = [i for i, c in enumerate(cells) if YOURS in c.get("metadata", {}).get("tags", []) and c.get("outputs")]
    assert not untagged, (f"{path.name}: code cells {untagged} run a task of yours but are not tagged "
                          f"'{YOURS}' and 'nbval-ignore-output'")
    assert not stored, (f"{path.name}: code cells {stored} run a task of yours and store the reference's output: "
                        f"`python tools/check_notebooks.py --write notebooks/{path.name}` drops it")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_errors(path: Path):
    errors = [i for i, c in enumerate(code_cells(path))
              if any(o["output_type"] == "error" for o in c.get("outputs", []))]
    assert not errors, f"{path.name}: code cells {errors} stored an error"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_machine_dependent_cells_are_ignored_by_nbval(path: Path):
    """A cell that prints a time or a version, or shows a widget, must not be compared by nbval."""
    bad = []
    for i, cell in enumerate(code_cells(path)):
        text = source(cell)
        if text.lstrip().startswith(IGNORE) or runs_your_task(cell):
            continue
        lines = text.splitlines()
        shown = [line for line in lines if "print(" in line] + lines[-1:]   # printed, or the cell's value
        if any(re.search(MACHINE_DEPENDENT, line) for line in shown) or any(re.search(WIDGETS, line) for line in lines):
            bad.append(i)
    assert not bad, f"{path.name}: code cells {bad} show machine-dependent output without '{IGNORE}' as first line"


MAX_CELL_WORDS = 250   # a markdown cell fits on a screen: its words, tables and diagrams included


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_markdown_cell_runs_past_a_screen(path: Path):
    cells = json.loads(path.read_text())["cells"]
    long = {i: words for i, c in enumerate(cells) if c["cell_type"] == "markdown"
            and (words := len(source(c).split())) > MAX_CELL_WORDS}
    assert not long, (f"{path.name}: markdown cells over {MAX_CELL_WORDS} words (cell: words): {long}; cut words or "
                      "split the cell where its topic changes")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_structure(path: Path):
    """Title, what you will learn, what to remember, and (but for the last lesson) a link onward."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# "), "no title cell"
    assert "## What you will learn" in text
    assert "## What to remember" in text
    if not path.name.startswith("00"):
        assert "Recap of lesson" in text
    assert "**Next:**" in text
    for link in re.findall(r"\]\(([^)#]+\.ipynb)\)", text):
        assert (path.parent / link).exists(), f"{path.name} links to {link}, which does not exist"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_name_their_check_command(path: Path):
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for module, symbol in re.findall(r"exercises/(lesson\d\d_\w+)\.py::([\w.]+)", text):
        lesson = module[len("lesson"):len("lesson") + 2]
        assert re.search(rf"pytest tests/exercises -k lesson{lesson}_task\d", text), \
            f"{path.name}: exercise {module}.{symbol} without its check command"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_your_turn_has_a_folded_answer_key(path: Path):
    """A self-paced learner checks their reasoning: each "## Your turn" is followed by a folded "What you should
    see", which stays in the workspace copy (it is not a prediction's answer, which the workspace removes)."""
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and source(cell).startswith("## Your turn"):
            key = cells[i + 1] if i + 1 < len(cells) else {"cell_type": None, "source": []}
            assert key["cell_type"] == "markdown" and source(key).startswith(
                "<details><summary>What you should see"), f"{path.name}, cell {i}: its Your turn has no answer key"
            assert not any(t.startswith("answer:") for t in key.get("metadata", {}).get("tags", [])), path.name
