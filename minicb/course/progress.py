"""Where you stand in the course: every task, done, failing or not started, and the command that checks it.

`python -m minicb progress` (or `make progress`) grades your exercises/, whatever MINICB_IMPL says. A task
whose functions are all still their stubs is "not started", read from the source, so its tests need
not run; the tests of every other task run once, in one quiet pytest process, and decide between
"done" and "failing".
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from minicb.course import IMPL_VARIABLE, TASKS, Task, predictions, stub_label

DONE, FAILING, NOT_STARTED, NOT_CHECKED = "done", "failing", "not started", "not checked"
TEST_NAME = re.compile(r"test_lesson(\d\d)_task(\d+)_")


@dataclass(frozen=True)
class TaskResult:
    task: Task
    state: str
    why: str = ""   # for "failing" and "not checked": what the test run said


def find_function(tree: ast.Module, symbol: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition of `symbol` ("name" or "Class.name") at the top of a module, if there is one."""
    body = tree.body
    *classes, name = symbol.split(".")
    for cls in classes:
        body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls), [])
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def started(task: Task, root: Path) -> bool:
    """Whether any of the task's functions in exercises/ is more than its stub. A file that does not
    parse, or a function that is not there, counts as started: its tests say what is wrong."""
    try:
        tree = ast.parse((root / "exercises" / f"{task.module}.py").read_text())
    except (OSError, SyntaxError):
        return True
    for symbol in task.symbols:
        node = find_function(tree, symbol)
        if node is None or stub_label(node) != task.label:
            return True
    return False


def run_tests(tasks: list[Task], root: Path) -> dict[tuple[int, int], list[tuple[str, str]]]:
    """(lesson, task) -> (outcome, message) for each of their exercise tests, from one pytest run on
    exercises/. Outcomes: "passed", "failed" (errors included) and "skipped"."""
    selection = " or ".join(f"lesson{t.lesson:02d}_task{t.number}" for t in tasks)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "exercises.xml"
        # A collection error (a lesson file that does not import) must not stop the other lessons' tests.
        command = [sys.executable, "-m", "pytest", "tests/exercises", "-q", "-p", "no:cacheprovider",
                   "--continue-on-collection-errors", "-k", selection, f"--junitxml={report}"]
        done = subprocess.run(command, cwd=root, env={**os.environ, IMPL_VARIABLE: "exercises"},
                              capture_output=True, text=True, check=False)
        if not report.exists():
            raise RuntimeError(f"pytest could not run the exercise tests (exit code {done.returncode}):\n"
                               + (done.stdout + done.stderr)[-2000:])
        cases = ET.parse(report).getroot().iter("testcase")
    results: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for case in cases:
        name = TEST_NAME.match(case.get("name", ""))
        if name is None:   # a collection error: its module's tests are missing from the results
            continue
        outcome, message = "passed", ""
        for kind, seen in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            found = case.find(kind)
            if found is not None:
                outcome, message = seen, found.get("message", "")
                break
        results.setdefault((int(name.group(1)), int(name.group(2))), []).append((outcome, message))
    return results


def check(root: Path, lessons: Collection[int] | None = None, announce: bool = True) -> list[TaskResult]:
    """Every task (of `lessons`, if given), in order, with its state; `announce`: say that tests run."""
    tasks = [t for t in TASKS if lessons is None or t.lesson in lessons]
    to_run = [t for t in tasks if started(t, root)]
    outcomes = {}
    if to_run:
        if announce:
            print(f"checking the {len(to_run)} tasks you have started (pytest tests/exercises)...", flush=True)
        outcomes = run_tests(to_run, root)
    results = []
    for task in tasks:
        ran = outcomes.get((task.lesson, task.number), [])
        failed = [message for outcome, message in ran if outcome == "failed"]
        if task not in to_run:
            results.append(TaskResult(task, NOT_STARTED))
        elif failed:
            results.append(TaskResult(task, FAILING, failed[0]))
        elif not ran:
            results.append(TaskResult(task, FAILING, "none of its tests ran: its command says why"))
        elif skipped := [message for outcome, message in ran if outcome == "skipped"]:
            results.append(TaskResult(task, NOT_CHECKED, skipped[0]))   # a rule left unchecked is not done
        else:
            results.append(TaskResult(task, DONE))
    return results


def render(results: list[TaskResult]) -> str:
    """One line per task under a line per lesson, and how many are done."""
    lines = []
    lesson = None
    for r in results:
        t = r.task
        if t.lesson != lesson:
            lesson = t.lesson
            lines.append(f"Lesson {t.lesson:02d}  exercises/{t.module}.py")
        lines.append(f"  task {t.number}  {t.name:36s} {r.state:12s} {t.command}")
        if r.why:   # the rule that broke, whole: it is what the learner needs to read
            lines.append(f"          {r.why.splitlines()[0]}")
    done = sum(r.state == DONE for r in results)
    lines.append(f"{done} of {len(results)} tasks done")
    return "\n".join(lines)


def render_predictions(root: Path, lessons: Collection[int] | None = None) -> str:
    """Per lesson, how many of its predictions you made in your workspace, and how many held."""
    store = predictions.workspace_store(root)
    counts = predictions.lesson_counts(predictions.load(store))
    lines = [f"Predictions ({store.relative_to(root)}, made in your workspace):"]
    for lesson, (asked, made, right) in sorted(counts.items()):
        if lessons is None or int(lesson[:2]) in lessons:   # --lesson 6 counts lesson 06b's too
            lines.append(f"  lesson {lesson}  {made} of {asked} made, {right} right")
    return "\n".join(lines)
