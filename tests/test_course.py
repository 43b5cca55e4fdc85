"""The exercise system itself: stubs and solutions agree on every signature, stubs hold no solution
logic, every exercise test fails on the stubs with its own task's message, and a lesson runs on
unfinished stubs by falling back to the reference, saying so."""
from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import write_files

from minicb import course
from minicb.cli import main
from minicb.course import progress
from minicb.course.capstone import missed
from minicb.course.slo import SloReport
from minicb.sampling import SamplingParams
from minicb.stats.goodput import SloTarget

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
    for symbol in task.symbols:
        stub = resolve(course.lesson(task.module, "exercises"), symbol)
        solution = resolve(course.lesson(task.module, "solutions"), symbol)
        assert parameters(stub) == parameters(solution), f"{task.module}::{symbol} differs between the two"


# Lesson 05's stub is a skeleton: its host function's launch code (given) follows the raise, and its
# @triton.jit kernel holds the given part with `# TODO` markers where the learner's code goes.
SKELETON_FILES = {"lesson05_triton"}
# What a skeleton kernel must leave to the learner: the scores, the softmax, the store, the reference's helpers.
SKELETON_KEEPS_OUT = {"dot", "sum", "max", "maximum", "exp", "exp2", "where", "store", "load_context_tile",
                      "online_softmax_update"}


def is_triton_kernel(node: ast.FunctionDef) -> bool:
    return any(ast.unparse(d).startswith("triton.jit") for d in node.decorator_list)


def function_text(source: str, node: ast.FunctionDef) -> str:
    """A function's lines, the indented comments after its last statement included (where its last TODOs are)."""
    lines = source.splitlines()
    end = node.end_lineno
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1
    return "\n".join(lines[node.lineno - 1:end])


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.stem)
def test_stubs_hold_no_solution_logic(path):
    """Every function's first statement (after a docstring) is `raise NotImplementedError("Lesson NN,
    task M: ...")` naming a task of this file that course.TASKS knows, and the task covers that function;
    outside SKELETON_FILES it is the only statement. A class's __init__ only sets the state it starts
    from (given to the learner). A skeleton's kernel holds TODOs and none of what they ask for."""
    tasks = {t.label: t for t in course.TASKS if t.module == path.stem and not t.grows}
    source = path.read_text()
    seen = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
            else node.body
        if node.name == "__init__":
            assert all(isinstance(s, (ast.Assign, ast.AnnAssign)) for s in body), f"{path.name}: __init__ does more " \
                "than set the state"
            continue
        if is_triton_kernel(node):
            assert path.stem in SKELETON_FILES, f"{path.name}::{node.name}: a kernel outside a skeleton file"
            assert "# TODO" in function_text(source, node), f"{path.name}::{node.name} has no TODO"
            used = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} \
                | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            leaked = used & SKELETON_KEEPS_OUT
            assert not leaked, f"{path.name}::{node.name} does a TODO's work: {leaked}"
            continue
        assert body and isinstance(body[0], ast.Raise), f"{path.name}::{node.name} does not start with its raise"
        if path.stem not in SKELETON_FILES:
            assert len(body) == 1, f"{path.name}::{node.name} holds more than a raise"
        call = body[0].exc
        assert isinstance(call, ast.Call) and call.func.id == "NotImplementedError", node.name
        message = call.args[0].value
        label = re.match(r"Lesson \d\d, task \d+", message).group(0)
        assert label in tasks and node.name in {s.split(".")[-1] for s in tasks[label].symbols}, \
            f"{node.name}: {message!r}"
        assert course.stub_label(node) == label, f"course does not see {node.name} as a stub"
        seen.add(label)
    assert seen == set(tasks), f"tasks without a stub in {path.name}: {set(tasks) - seen}"


def test_a_stub_is_a_function_whose_first_statement_raises_its_task():
    """course.stub_label: the raise first (after a docstring), whatever follows it; anything before it,
    or another message, is written code."""
    raise_ = 'raise NotImplementedError("Lesson 05, task 1: f: do it. Check it with: ...")'
    cases = {f'"""Doc."""\n{raise_}': "Lesson 05, task 1",
             f"{raise_}\nx = 1\nreturn x": "Lesson 05, task 1",
             f"x = 1\n{raise_}": None,
             '"""Doc."""': None,
             'raise NotImplementedError("not yet")': None,
             'raise ValueError("Lesson 05, task 1: f")': None}
    for body, label in cases.items():
        node = ast.parse("def f():\n" + textwrap.indent(body, "    ")).body[0]
        assert course.stub_label(node) == label, body


def test_every_exercise_test_fails_on_the_stubs_with_its_own_task(tmp_path):
    report = tmp_path / "stubs.xml"
    env = {**os.environ, course.IMPL_VARIABLE: "exercises"}
    # Only the graded tests (test_lessonNN_taskM_...): the grading's own tests check no learner code.
    subprocess.run([sys.executable, "-m", "pytest", "tests/exercises", "-q", "-p", "no:cacheprovider", "-k", "_task",
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
        task = next(t for t in course.TASKS if (t.lesson, t.number) == (int(lesson), int(number)))
        want = f"NotImplementedError: {task.stub}:"   # a task that grows another's function fails with that stub
        assert want in failure.get("message", ""), f"{name} failed for another reason: {failure.get('message')}"
        graded.add((int(lesson), int(number)))
    assert count and graded == {(t.lesson, t.number) for t in course.TASKS}, "a task has no test"


@pytest.fixture
def fresh_notes(monkeypatch):
    """A process that has not said anything yet: a lesson's note is said again only when it changes."""
    monkeypatch.setattr(course, "_SAID", {})


def test_a_lesson_runs_on_the_stubs_with_the_reference_and_says_so(capsys, fresh_notes):
    stubs = course.lesson("lesson02_continuous", "exercises")
    assert course.attempt(stubs.plan_step, None) is None
    assert "not implemented yet: Lesson 02, task 1" in capsys.readouterr().out
    from minicb.engine import LLMEngine

    # A pool small enough that "auto" preemption must choose victims and how to evict them.
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=4, num_blocks=6, block_size=4,
                       preemption_mode="auto", swap_space_mb=1, parts=course.parts("exercises"))
    for n in (9, 1, 12, 7):
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
        engine.scheduler.check_invariants()
    assert any(s.preempted for s in engine.trace.steps)
    notes = capsys.readouterr().out.splitlines()
    # lesson=None: every lesson whose parts the engine runs says once that the reference runs them all.
    assert [line.split(" runs ")[0] for line in notes] == ["Lesson 02", "Lesson 03", "Lesson 04", "Lesson 06",
                                                           "Lesson 07", "Lesson 10"], notes
    for task in course.TASKS:
        # The engine's parts only (the kernel needs Triton): the tasks graded on their own are not in it.
        engine_part = task.symbol in course.FUNCTION_PARTS or task.symbol.startswith(f"{course.ALLOCATOR_CLASS}.")
        if engine_part and task.symbol != "paged_decode_attention" and not task.grows:
            note = next(line for line in notes if line.startswith(f"Lesson {task.lesson:02d} runs "))
            listed, _, rest = note.split(": ", 1)[1].partition(" (not written yet: the reference runs; write ")
            assert re.split(r", | and ", listed) == list(task.symbols), note
            assert rest.endswith(f", then: {task.command})"), note
    course.parts("exercises")
    assert capsys.readouterr().out == "", "a second engine repeated the notes"


# Fake lessons for the seam's mechanism, independent of the real engine and stubs: each written function
# returns ("mine", x), each reference ("reference", x).
FAKE_LESSONS = {
    "lesson02_continuous": '''
def plan_step(x):
    return ("mine", x)
''',
    "lesson03_selective": '''
def build_flat_batch(x):
    if x > 0:
        return ("mine", x)
    raise NotImplementedError("Lesson 03, task 1: build_flat_batch: the flat batch the model runs on. Check ...")
''',
    "lesson04_paged_kv": '''
class PagedAllocator:
    def __init__(self):
        self.free_blocks, self.tables = [0, 1, 2, 3], {}

    def can_allocate(self, n):
        return ("mine", n)

    def allocate(self, seq_id, n):
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.allocate: blocks for a new sequence.")

    def can_append(self, seq_id):
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.can_append: whether a sequence can grow.")

    def append_slots(self, seq_id):
        return ("mine", seq_id)

    def free(self, seq_id):
        raise NotImplementedError("Lesson 04, task 1: PagedAllocator.free: give every block back.")
''',
    "lesson06_preemption": '''
def choose_victim(x):
    return ("mine", x)


def should_swap(x):
    """Recompute or swap."""
    raise NotImplementedError("Lesson 06, task 1: should_swap: recompute or swap this victim. Check it with: ...")
''',
    "lesson07_slo": '''
def chunk_size(x):
    raise NotImplementedError("Lesson 07, task 1: chunk_size: how many of a request's tokens run this step.")
''',
    "lesson10_prefix_cache": '''
def block_hashes(x):
    return ("mine", x)


def longest_cached_prefix(x):
    raise NotImplementedError("Lesson 10, task 1: longest_cached_prefix: how many leading blocks the cache holds.")
''',
}


class ReferenceAllocator:
    """Works on the fake PagedAllocator's state, as minicb's works on a learner's."""

    def can_allocate(self, n):
        return ("reference", n)

    def allocate(self, seq_id, n):
        self.tables[seq_id] = [self.free_blocks.pop(0) for _ in range(n)]
        return self.tables[seq_id]

    def can_append(self, seq_id):
        return ("reference", seq_id)

    def append_slots(self, seq_id):
        return ("reference", seq_id)

    def free(self, seq_id):
        self.free_blocks += self.tables.pop(seq_id)


def reference(name):
    def part(x):
        return ("reference", x)
    part.__name__ = name
    return part


def fake_parts(**plugged) -> types.SimpleNamespace:
    """EngineParts' shape, the fake references its defaults."""
    defaults = {name: reference(name) for name in course.FUNCTION_PARTS}
    return types.SimpleNamespace(**{**defaults, "allocator": ReferenceAllocator, **plugged})


@pytest.fixture
def fake_course(tmp_path, monkeypatch, fresh_notes):
    """course.parts() over FAKE_LESSONS (real files, so their source can be read) and fake_parts."""
    modules = {}
    for name, source in FAKE_LESSONS.items():
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"fake_{name}", path)
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    monkeypatch.setattr(course, "_module", lambda module, which: modules[module])
    monkeypatch.setattr(course, "EngineParts", fake_parts)
    # The fake parts answer with tuples no contract allows: the seam's checks (tests/graders) are recorded, not run.
    monkeypatch.setattr(course, "checked", lambda parts, reached=7: CHECKED.append(parts) or parts)
    return modules


CHECKED: list = []


def test_a_lesson_says_once_which_of_its_parts_are_yours(fake_course, capsys):
    parts = course.parts("exercises", lesson=6)
    assert capsys.readouterr().out == (
        "Lesson 06 runs exercises/lesson06_preemption.py: choose_victim (yours), should_swap (not written "
        "yet: the reference runs; write it, then: pytest tests/exercises -k lesson06_task1)\n")
    assert parts.choose_victim(1) == ("mine", 1) and parts.should_swap(1) == ("reference", 1)
    assert parts.chunk_size(1) == ("reference", 1)   # lesson 07's stub: replaced, and not a word about it
    assert CHECKED[-1] is parts   # every part the engine gets is checked against its contract at the seam
    course.parts("exercises", lesson=6)
    course.parts("solutions", lesson=2)   # the reference is nobody's work to report on
    assert capsys.readouterr().out == ""
    course.parts("exercises", lesson=2)
    assert capsys.readouterr().out == "Lesson 02 runs exercises/lesson02_continuous.py: plan_step (yours)\n"
    parts = course.parts("exercises", lesson=10)
    assert capsys.readouterr().out == (
        "Lesson 10 runs exercises/lesson10_prefix_cache.py: block_hashes (yours), longest_cached_prefix (not written "
        "yet: the reference runs; write it, then: pytest tests/exercises -k lesson10_task1)\n")
    assert parts.block_hashes(1) == ("mine", 1) and parts.longest_cached_prefix(1) == ("reference", 1)


def test_your_allocator_runs_the_references_methods_where_yours_are_stubs(fake_course, capsys):
    allocator = course.parts("exercises", lesson=4).allocator
    note = capsys.readouterr().out
    assert note == ("Lesson 04 runs exercises/lesson04_paged_kv.py: PagedAllocator.can_allocate and "
                    "PagedAllocator.append_slots (yours), PagedAllocator.allocate, PagedAllocator.can_append and "
                    "PagedAllocator.free (not written yet: the reference runs; write them, then: pytest "
                    "tests/exercises -k lesson04_task1)\n"), note
    pool = allocator()
    assert isinstance(pool, fake_course["lesson04_paged_kv"].PagedAllocator)
    assert pool.allocate("a", 3) == [0, 1, 2] and pool.free_blocks == [3]    # the reference, on your state
    assert pool.can_allocate(1) == ("mine", 1) and pool.append_slots("a") == ("mine", "a")
    assert pool.can_append("a") == ("reference", "a")
    pool.free("a")
    assert sorted(pool.free_blocks) == [0, 1, 2, 3] and not pool.tables


FELL_BACK = ("not implemented yet: Lesson 03, task 1 (the flat batch the model runs on): write "
             "exercises/lesson03_selective.py::build_flat_batch, then check it with: pytest tests/exercises -k "
             "lesson03_task1. Meanwhile the engine runs the reference.\n")


def test_a_written_part_that_still_raises_its_stub_error_falls_back_saying_so_in_every_engine(fake_course, capsys):
    """Each engine's parts say it once, when they fall back: not once per call (a loop of steps), and not
    once per process (a second engine, or a function fixed and broken again, is news)."""
    parts = course.parts("exercises", lesson=3)
    assert capsys.readouterr().out.endswith("build_flat_batch (yours)\n")
    assert parts.build_flat_batch(1) == ("mine", 1)
    assert parts.build_flat_batch(0) == ("reference", 0)
    assert parts.build_flat_batch(1) == ("reference", 1)   # from then on
    assert capsys.readouterr().out == FELL_BACK
    second = course.parts("exercises", lesson=3).build_flat_batch
    assert second(1) == ("mine", 1) and capsys.readouterr().out == ""
    assert [second(0) for _ in range(3)] == [("reference", 0)] * 3
    assert capsys.readouterr().out == FELL_BACK
    # Lesson 03's code, running in lesson 02's engine: its stubs are replaced silently, but what the learner
    # wrote falling back is said there too.
    other = course.parts("exercises", lesson=2).build_flat_batch
    capsys.readouterr()
    assert other(0) == ("reference", 0) and capsys.readouterr().out == FELL_BACK


@pytest.fixture
def checkout(tmp_path, monkeypatch, fresh_notes):
    """A checkout holding FAKE_LESSONS as its exercises/, which course.lesson() imports for real in this
    process (in place of this checkout's, put back afterwards), with fake_parts as minicb's."""
    for name in ("exercises", "solutions", "minicb"):
        (tmp_path / name).mkdir()
    (tmp_path / "exercises" / "__init__.py").write_text("")
    for name, source in FAKE_LESSONS.items():
        (tmp_path / "exercises" / f"{name}.py").write_text(source)
    for name in [n for n in sys.modules if n.partition(".")[0] == "exercises"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)   # as in a notebook: __pycache__ is written (and read)
    monkeypatch.setattr(course, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(course, "_RAN", {})
    monkeypatch.setattr(course, "EngineParts", fake_parts)
    monkeypatch.setattr(course, "checked", lambda parts, reached=7: parts)   # as in fake_course
    yield tmp_path / "exercises"
    for name in [n for n in sys.modules if n.partition(".")[0] == "exercises"]:
        del sys.modules[name]   # the fake checkout's; monkeypatch then puts this checkout's back


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path.name}"
    path.write_text(text.replace(old, new))


SWAP_STUB = ('raise NotImplementedError("Lesson 06, task 1: should_swap: recompute or swap this victim. '
             'Check it with: ...")')


def test_an_edited_exercise_runs_in_the_same_process_without_a_restart(checkout, capsys):
    held = course.lesson("lesson03_selective", "exercises")   # what a notebook's `lesson03 = ...` keeps
    first = held.build_flat_batch
    assert course.parts("exercises", lesson=3).build_flat_batch(1) == ("mine", 1)
    assert course.lesson("lesson03_selective", "exercises").build_flat_batch is first, "an unchanged file re-ran"
    # The same size, within the same second: Python's bytecode cache alone would run the old code again.
    edit(checkout / "lesson03_selective.py", '("mine", x)', '("edit", x)')
    assert course.parts("exercises", lesson=3).build_flat_batch(1) == ("edit", 1)
    assert held.build_flat_batch(1) == ("edit", 1), "the module the notebook holds still runs the old code"
    capsys.readouterr()

    course.parts("exercises", lesson=6)
    assert "should_swap (not written yet" in capsys.readouterr().out
    edit(checkout / "lesson06_preemption.py", SWAP_STUB, 'return ("mine", x)')
    parts = course.parts("exercises", lesson=6)
    assert parts.should_swap(1) == ("mine", 1)
    assert capsys.readouterr().out == ("Lesson 06 runs exercises/lesson06_preemption.py: choose_victim and "
                                       "should_swap (yours)\n"), "a changed note was not said again"
    course.parts("exercises", lesson=6)
    assert capsys.readouterr().out == "", "an unchanged note was said again"
    edit(checkout / "lesson06_preemption.py", 'return ("mine", x)\n', SWAP_STUB + "\n")
    assert course.parts("exercises", lesson=6).should_swap(1) == ("reference", 1)
    assert "should_swap (not written yet" in capsys.readouterr().out, "a stub put back was not said"


def test_a_file_that_does_not_import_breaks_only_its_own_lesson(checkout, capsys):
    lesson10 = checkout / "lesson10_prefix_cache.py"
    edit(lesson10, "def block_hashes(x):", "def block_hashes(x:")   # line 2 of the file
    parts = course.parts("exercises", lesson=2)
    broken, note = capsys.readouterr().out.splitlines()
    assert broken.startswith("exercises/lesson10_prefix_cache.py line 2 does not import (SyntaxError: "), broken
    assert broken.endswith("this engine runs the reference for lesson 10's parts; "
                           "course.lesson('lesson10_prefix_cache') shows the error"), broken
    assert note == "Lesson 02 runs exercises/lesson02_continuous.py: plan_step (yours)"
    assert parts.plan_step(1) == ("mine", 1)
    assert parts.block_hashes(1) == ("reference", 1) and parts.longest_cached_prefix(1) == ("reference", 1)
    course.parts("exercises", lesson=2)
    assert capsys.readouterr().out == "", "the same broken file was reported again for the same code"
    with pytest.raises(SyntaxError):
        course.parts("exercises", lesson=10)   # its own lesson: the learner sees the error itself
    with pytest.raises(SyntaxError):
        course.lesson("lesson10_prefix_cache", "exercises")

    edit(checkout / "lesson06_preemption.py", "def choose_victim(x):", "ROOM = undefined_name\n\n\ndef choose_victim(x):")
    allocator = course.parts("exercises", lesson=4).allocator   # any error on import, at its line
    assert capsys.readouterr().out.splitlines()[0] == (
        "exercises/lesson06_preemption.py line 2 does not import (NameError: name 'undefined_name' is not defined): "
        "this engine runs the reference for lesson 06's parts; course.lesson('lesson06_preemption') shows the error")
    assert allocator().can_allocate(1) == ("mine", 1)
    with pytest.raises(NameError):
        course.parts("exercises", lesson=6)

    edit(lesson10, "def block_hashes(x:", "def block_hashes(x):")
    assert course.parts("exercises", lesson=2).block_hashes(1) == ("mine", 1)
    edit(lesson10, "def block_hashes(x):", "def block_hashes(x:")   # broken again, once it had imported
    assert course.parts("exercises", lesson=2).block_hashes(1) == ("reference", 1)
    assert "lesson10_prefix_cache.py line 2 does not import" in capsys.readouterr().out, "a new break went unsaid"


def test_the_checkout_is_found_from_the_working_directory(tmp_path):
    for name in ("exercises", "solutions", "minicb", "notebooks"):
        (tmp_path / name).mkdir()
    assert course.find_repo_root(tmp_path / "notebooks") == tmp_path
    assert course.find_repo_root(tmp_path / "minicb") == tmp_path
    (tmp_path / "solutions").rmdir()
    assert course.find_repo_root(tmp_path / "notebooks") == Path(course.__file__).resolve().parents[2]   # minicb/course/


def test_a_notebook_grades_its_own_checkout_not_the_installed_one(tmp_path):
    """minicb importable from this checkout (as an editable install makes it, exercises/ included), the
    notebook in another: lesson() loads the other's exercises/."""
    for name in ("exercises", "solutions"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "minicb").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "exercises" / "lesson02_continuous.py").write_text("WHERE = 'the notebook'\n")
    path = [str(course.REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    script = "from minicb import course; print(course.lesson('lesson02_continuous', 'exercises').WHERE)"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "notebooks", env=env,
                          capture_output=True, text=True, check=True)
    assert done.stdout == "the notebook\n", done.stderr


def test_exercises_imported_from_another_checkout_are_refused(monkeypatch, tmp_path):
    other = types.ModuleType("exercises")
    other.__path__ = [str(tmp_path / "exercises")]
    monkeypatch.setitem(sys.modules, "exercises", other)
    with pytest.raises(ImportError, match="already imported from .*restart the kernel"):
        course.lesson("lesson02_continuous", "exercises")
    with pytest.raises(ImportError, match="already imported from .*restart the kernel"):
        course.parts("exercises", lesson=2)   # every lesson's problem, not one file's to stand in for


def test_progress_lists_every_task_of_the_untouched_stubs_with_its_command(capsys):
    assert main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "checking" not in out, f"an exercise in the checkout is not its stub any more:\n{out}"
    for task in course.TASKS:
        line = next(line for line in out.splitlines() if line.endswith(task.command))
        assert f"task {task.number}  {task.name} " in line and " not started " in line, line
    assert out.endswith(f"\n0 of {len(course.TASKS)} tasks done\n")


# A checkout where lesson 02's task is written and passes, lesson 03's task is written and fails, lesson
# 06's file does not import, and lesson 07's chunk_size is written but its test skips, its task 2 untouched. Its tests stand in for tests/exercises: what they check is not the point here.
FAKE_CHECKOUT = {
    "exercises/__init__.py": "",
    "exercises/lesson02_continuous.py": FAKE_LESSONS["lesson02_continuous"],
    "exercises/lesson03_selective.py": FAKE_LESSONS["lesson03_selective"],
    "exercises/lesson06_preemption.py": "def choose_victim(x:\n",
    "exercises/lesson07_slo.py": '''
def chunk_size(x):
    return x


def slo_config():
    raise NotImplementedError("Lesson 07, task 2: slo_config: a configuration that meets the SLO.")
''',
    "tests/exercises/test_fakes.py": '''
import pytest


def test_lesson02_task1_passes():
    pass


def test_lesson07_task2_never_runs():
    raise AssertionError("an untouched stub's tests need not run")


@pytest.mark.parametrize("x", [1, 2])
def test_lesson03_task1_fails(x):
    assert x == 1, "wrong batch"


def test_lesson07_task1_passes_a_rule():
    pass


def test_lesson07_task1_skips():
    pytest.skip("needs a GPU")   # a rule left unchecked: the task is not done though its other rule passed
''',
    "tests/exercises/test_lesson06.py": "import exercises.lesson06_preemption\n\n\ndef test_lesson06_task1_x():\n"
                                        "    pass\n",
}


def test_progress_grades_a_checkout_with_one_pytest_run(tmp_path):
    write_files(tmp_path, FAKE_CHECKOUT)
    results = progress.check(tmp_path, lessons=[2, 3, 6, 7], announce=False)
    assert [(r.task.label, r.state) for r in results] == [
        ("Lesson 02, task 1", "done"), ("Lesson 03, task 1", "failing"), ("Lesson 06, task 1", "failing"),
        ("Lesson 06, task 2", "failing"), ("Lesson 06, task 3", "failing"), ("Lesson 07, task 1", "not checked"),
        ("Lesson 07, task 2", "not started"), ("Lesson 07, task 3", "failing")]
    assert "wrong batch" in results[1].why and results[2].why.startswith("none of its tests ran")
    assert "needs a GPU" in results[5].why
    out = progress.render(results)
    assert "  task 1  build_flat_batch" in out
    assert "pytest tests/exercises -k lesson03_task1\n          AssertionError" in out
    assert out.endswith("\n1 of 8 tasks done")


COUNTING_CONFTEST = '''
from pathlib import Path

from minicb.course.progress import TryCounter


def pytest_configure(config):
    config.pluginmanager.register(TryCounter(Path(__file__).resolve().parents[1]), "minicb-tries")
'''


def test_a_try_is_a_whole_check_of_a_started_task_on_a_changed_file(tmp_path):
    write_files(tmp_path, {**FAKE_CHECKOUT, "tests/conftest.py": COUNTING_CONFTEST})
    lesson03 = tmp_path / "exercises/lesson03_selective.py"

    def pytest_run(*args: str, impl: str = "exercises") -> None:
        subprocess.run([sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider",
                        "--continue-on-collection-errors"], cwd=tmp_path,
                       env={**os.environ, course.IMPL_VARIABLE: impl}, capture_output=True, check=False)

    progress.check(tmp_path, lessons=[2, 3, 6, 7], announce=False)
    pytest_run("tests/exercises", "-k", "lesson03_task1")   # the same file again
    lesson03.write_text(lesson03.read_text() + "# a second try\n")
    pytest_run("tests/exercises", "-k", "lesson03_task1")
    for path in (tmp_path / "exercises/lesson02_continuous.py", lesson03):
        path.write_text(path.read_text() + "# stopped by -x at 03.1's failure: 02.1 may not have run all its tests\n")
    pytest_run("tests/exercises/test_fakes.py", "-x", "-k", "lesson02_task1 or lesson03_task1")
    lesson03.write_text(lesson03.read_text() + "# not a try: each run below checks too little or the reference\n")
    pytest_run("tests/exercises", "-k", "lesson03_task1 and 2")
    pytest_run("tests/exercises/test_fakes.py::test_lesson03_task1_fails")
    pytest_run("tests/exercises", impl="solutions")
    tries = progress.load(tmp_path)
    assert set(tries) == {"02.1", "03.1", "07.1"}, "06.1's tests never ran, and 07.2 is not started"
    assert (tries["02.1"].tries, tries["02.1"].passed_on, tries["02.1"].failures) == (1, 1, [])
    assert (tries["03.1"].tries, tries["03.1"].passed_on) == (3, None)
    assert tries["03.1"].failures == ["AssertionError: wrong batch"] * 3
    assert tries["07.1"].failures == ["not checked: needs a GPU"]

    (tmp_path / "tests/exercises/test_fakes.py").write_text("def test_lesson03_task1_now_passes():\n    pass\n")
    progress.check(tmp_path, lessons=[3], announce=False)
    lesson03.write_text(lesson03.read_text() + "# after the pass\n")
    progress.check(tmp_path, lessons=[3], announce=False)
    tries = progress.load(tmp_path)
    assert (tries["03.1"].tries, tries["03.1"].passed_on, len(tries["03.1"].failures)) == (5, 4, 3)
    out = progress.render(progress.check(tmp_path, lessons=[2, 3], announce=False), tries)
    assert "pytest tests/exercises -k lesson03_task1\n          5 tries, passed on try 4\n" in out
    assert out.endswith("\n1 of the 2 tasks you passed took more than one try (workspace/.tries.json)")
    progress.log_path(tmp_path).write_text('{"03.1": {"runs": 4}}')
    with pytest.raises(ValueError, match=r"\.tries\.json is not what the course writes there .*delete it"):
        progress.load(tmp_path)


def test_an_unknown_impl_is_refused(monkeypatch):
    monkeypatch.setenv(course.IMPL_VARIABLE, "mine")
    with pytest.raises(ValueError, match="use 'exercises' .* or 'solutions'"):
        course.impl()


def test_a_missed_target_never_reads_as_met():
    """A trial's capstone failed with "p99 ITL 50.0 ms > 50 ms": a miss by a fraction of the last decimal shown."""
    report = SloReport(served=380, rejected=20, ttft_p99_s=1.0004, itl_p99_s=0.05004, goodput_rps=30.0, met=False)
    assert missed(report, SloTarget()) == "p99 TTFT 1.0004 s > 1.0 s, p99 ITL 50.04 ms > 50 ms"
    assert missed(SloReport(400, 0, 0.5, 0.0612, 30.0, False), SloTarget()) == "p99 ITL 61.2 ms > 50 ms"
