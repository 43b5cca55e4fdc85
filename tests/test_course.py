"""The exercise system itself: stubs and solutions agree on every signature, stubs hold no solution
logic, every exercise test fails on the stubs with its own task's message, and a lesson runs on
unfinished stubs by falling back to the reference, saying so."""
from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from minicb import course
from minicb.sampling import SamplingParams

LESSON_FILES = sorted((course.REPO_ROOT / "exercises").glob("lesson*.py"))


def resolve(module, symbol: str):
    obj = module
    for part in symbol.split("."):
        obj = getattr(obj, part)
    return obj


def parameters(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("task", course.TASKS, ids=lambda t: f"lesson{t.lesson:02d}_task{t.number}")
def test_stub_and_solution_signatures_agree(task):
    stub = resolve(course.lesson(task.module, "exercises"), task.symbol)
    solution = resolve(course.lesson(task.module, "solutions"), task.symbol)
    assert parameters(stub) == parameters(solution), f"{task.module}::{task.symbol} differs between the two"


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.stem)
def test_stubs_hold_no_solution_logic(path):
    """Every function body is a docstring and one `raise NotImplementedError("Lesson NN, task M: <name>: ...")`
    naming itself and a task of this file that course.TASKS knows. A class's __init__ only sets the
    state it starts from (given to the learner)."""
    tasks = {t.label: t for t in course.TASKS if t.module == path.stem}
    seen = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
            else node.body
        if node.name == "__init__":
            assert all(isinstance(s, (ast.Assign, ast.AnnAssign)) for s in body), f"{path.name}: __init__ does more " \
                "than set the state"
            continue
        assert len(body) == 1 and isinstance(body[0], ast.Raise), f"{path.name}::{node.name} holds more than a raise"
        call = body[0].exc
        assert isinstance(call, ast.Call) and call.func.id == "NotImplementedError", node.name
        message = call.args[0].value
        label = re.match(r"Lesson \d\d, task \d+", message).group(0)
        assert label in tasks and re.search(rf"\b{node.name}: ", message), f"{node.name}: {message!r}"
        seen.add(label)
    assert seen == set(tasks), f"tasks without a stub in {path.name}: {set(tasks) - seen}"


def test_every_exercise_test_fails_on_the_stubs_with_its_own_task(tmp_path):
    report = tmp_path / "stubs.xml"
    env = {**os.environ, course.IMPL_VARIABLE: "exercises"}
    subprocess.run([sys.executable, "-m", "pytest", "tests/exercises", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={report}"], cwd=course.REPO_ROOT, env=env, capture_output=True, check=False)
    cases = ET.parse(report).getroot().iter("testcase")
    graded = set()
    count = 0
    for case in cases:
        name = case.get("name")
        graded_task = re.match(r"test_lesson(\d\d)_task(\d+)_", name)
        if graded_task is None:   # a test of the grading itself (a negative control), on no learner code
            continue
        count += 1
        lesson, number = graded_task.groups()
        failure = case.find("failure")
        assert failure is not None, f"{name} passed on the stubs: it does not exercise its task"
        want = f"NotImplementedError: Lesson {lesson}, task {int(number)}:"
        assert want in failure.get("message", ""), f"{name} failed for another reason: {failure.get('message')}"
        graded.add((int(lesson), int(number)))
    assert count and graded == {(t.lesson, t.number) for t in course.TASKS}, "a task has no test"


def test_a_lesson_runs_on_the_stubs_with_the_reference_and_says_so(capsys):
    stubs = course.lesson("lesson02_continuous", "exercises")
    assert course.attempt(stubs.plan_admissions, [], 1, 16, 4, True) is None
    assert "not implemented yet: Lesson 02, task 2" in capsys.readouterr().out
    from minicb.engine import LLMEngine

    # A pool small enough that "auto" preemption must choose victims and how to evict them.
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=4, num_blocks=6, block_size=4,
                       preemption_mode="auto", swap_space_mb=1, parts=course.parts("exercises"))
    for n in (9, 1, 12, 7):
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
        engine.block_manager.check_invariants()
    assert any(s.preempted for s in engine.trace.steps)
    notes = capsys.readouterr().out
    for task in course.TASKS:
        if task.lesson in (2, 3, 4, 6):   # the parts this engine ran
            assert notes.count(f"{task.label} ") == 1, f"expected one fallback note for {task.label}:\n{notes}"
    assert "Meanwhile the engine runs the reference" in notes


def test_an_unknown_impl_is_refused(monkeypatch):
    monkeypatch.setenv(course.IMPL_VARIABLE, "mine")
    with pytest.raises(ValueError, match="use 'exercises' .* or 'solutions'"):
        course.impl()
