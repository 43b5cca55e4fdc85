"""Where you stand in the course: every task, done, failing or not started, the command that checks it, and how
many tries it took.

`python -m minicb progress` (or `make progress`) grades your exercises/, whatever MINICB_IMPL says. A task
whose functions are all still their stubs is "not started", read from the source, so its tests need
not run; the tests of every other task run once, in one quiet pytest process, and decide between
"done" and "failing".

Every try at a task is counted in workspace/.tries.json: a run of its whole check (`pytest tests/exercises
-k lessonNN_taskM`, or `make progress`) on a version of your exercises/ file it has not checked before, with the
try on which it first passed and the rule each failing try broke before that. It is the course's own measure of
whether a task makes you think: a workshop teacher who collects the files sees which tasks took the room the
most tries, and which rules stopped people. Nothing leaves your machine, and git ignores workspace/. Not
counted: a run on a file unchanged since the task's last try (so `make progress` adds a try only where you
changed something), a run of part of a task's tests (one pair of lesson 04's, say, or a test by its node id),
and a run on a task not started.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

from minicb.course import IMPL_VARIABLE, TASKS, Task, impl, predictions, stub_label
from minicb.course.predictions import WORKSPACE

DONE, FAILING, NOT_STARTED, NOT_CHECKED = "done", "failing", "not started", "not checked"
TEST_NAME = re.compile(r"test_lesson(\d\d)_task(\d+)_")
LOG_NAME = ".tries.json"   # in workspace/: each task's tries
KEPT_FAILURES = 20   # the rules of the first failing tries: what stopped the learner, not a full history


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
        if node is None or stub_label(node) != task.stub:
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


def render(results: list[TaskResult], tries: dict[str, TaskTries] | None = None) -> str:
    """One line per task under a line per lesson, and how many are done; with `tries`, how many each task took."""
    lines = []
    lesson = None
    shown: dict[str, TaskTries] = {}
    for r in results:
        t = r.task
        if t.lesson != lesson:
            lesson = t.lesson
            lines.append(f"Lesson {t.lesson:02d}  exercises/{t.module}.py")
        lines.append(f"  task {t.number}  {t.name:36s} {r.state:12s} {t.command}")
        if tried := (tries or {}).get(key := task_key(t.lesson, t.number)):
            shown[key] = tried
            lines.append(f"          {describe(tried)}")
        if r.why:   # the rule that broke, whole: it is what the learner needs to read
            lines.append(f"          {r.why.splitlines()[0]}")
    done = sum(r.state == DONE for r in results)
    lines.append(f"{done} of {len(results)} tasks done")
    if shown:
        lines.append(summary(shown))
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


@dataclass
class TaskTries:
    """One task's tries, as workspace/.tries.json keeps them: runs of its whole check, each on a new version of
    its exercises/ file."""
    tries: int = 0
    passed_on: int | None = None   # the try on which the whole check first passed
    failures: list[str] = field(default_factory=list)   # per failing try before that, the first rule it broke
    version: str = ""   # a digest of the exercises/ file the last try checked


def log_path(root: Path) -> Path:
    return root / WORKSPACE / LOG_NAME


def load(root: Path) -> dict[str, TaskTries]:
    """Task key ("06.2") -> its tries so far; empty before the first."""
    path = log_path(root)
    if not path.exists():
        return {}
    try:
        return {key: TaskTries(**value) for key, value in json.loads(path.read_text()).items()}
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"{path} is not what the course writes there ({error}): delete it, and the tries are "
                         "counted from zero") from error


def task_key(lesson: int, number: int) -> str:
    return f"{lesson:02d}.{number}"


def file_version(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""


def record(root: Path, outcomes: dict[str, tuple[str, str | None]]) -> None:
    """Count a try for each task in `outcomes` (task key -> the version of its file that the check ran on, and
    None when it passed, else the rule it broke) whose version is not the one its last try checked."""
    tries = load(root)
    new = {key: outcome for key, outcome in outcomes.items() if outcome[0] != tries.get(key, TaskTries()).version}
    if not new:
        return
    for key, (version, broken) in new.items():
        task = tries.setdefault(key, TaskTries())
        task.tries += 1
        task.version = version
        if broken is None:
            task.passed_on = task.passed_on or task.tries
        elif task.passed_on is None and len(task.failures) < KEPT_FAILURES:
            task.failures.append(broken)
    path = log_path(root)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({key: asdict(task) for key, task in sorted(tries.items())}, indent=1) + "\n")


def describe(task: TaskTries) -> str:
    """One line: how many tries, and the one that passed."""
    tried = f"{task.tries} {'try' if task.tries == 1 else 'tries'}"
    return f"{tried}, passed on try {task.passed_on}" if task.passed_on else f"{tried}, not passed yet"


def summary(tries: dict[str, TaskTries]) -> str:
    """How many of the passed tasks took more than one try."""
    passed = [task for task in tries.values() if task.passed_on]
    retried = sum(task.passed_on > 1 for task in passed)
    return f"{retried} of the {len(passed)} tasks you passed took more than one try ({WORKSPACE}/{LOG_NAME})"


class TryCounter:
    """The pytest plugin that counts the tries (tests/conftest.py registers it): at the end of a session on the
    learner's exercises/ (MINICB_IMPL=exercises), a try for each started task whose whole check ran."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.broken: dict[str, str | None] = {}   # task key -> the first rule its tests broke this run (None: none)
        self.partial: set[str] = set()   # tasks some of whose tests were left out (-k, --lf)

    @staticmethod
    def task_of(nodeid: str) -> str | None:
        path, _, name = nodeid.partition("::")
        graded = TEST_NAME.match(name.rpartition("::")[2])
        return task_key(int(graded[1]), int(graded[2])) if graded and "exercises" in Path(path).parts else None

    def pytest_deselected(self, items) -> None:
        self.partial.update(key for item in items if (key := self.task_of(item.nodeid)))

    def pytest_runtest_logreport(self, report) -> None:
        key = self.task_of(report.nodeid)
        if key is None or (report.passed and report.when != "call"):
            return
        self.broken.setdefault(key, None)
        if not report.passed and self.broken[key] is None:
            self.broken[key] = first_line(report)

    def pytest_sessionfinish(self, session, exitstatus: int) -> None:
        if impl() != "exercises" or any("::" in str(arg) for arg in session.config.args):
            return   # minicb's own tests grade the reference; a node id picks a few tests, not the check
        tasks = {task_key(t.lesson, t.number): t for t in TASKS}
        # A run stopped early (-x, Ctrl-C: pytest's exit status 2) may have left a task's other tests unrun: only
        # the tasks that broke a rule before it stopped are known.
        stopped = bool(session.shouldfail or session.shouldstop) or exitstatus == 2
        whole = {key: broken for key, broken in self.broken.items()
                 if key not in self.partial and (broken is not None or not stopped)}
        record(self.root, {key: (file_version(self.root / "exercises" / f"{tasks[key].module}.py"), broken)
                           for key, broken in whole.items() if key in tasks and started(tasks[key], self.root)})


def first_line(report) -> str:
    """What a failed or skipped test report says, in a line: its rule, or why it was not checked."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"not checked: {report.longrepr[2].removeprefix('Skipped: ')}"
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return (text.strip().splitlines() or ["failed"])[0][:300]
