"""The exercise checks grade the learner's own functions: one imported from minicb or the reference under the
task's name is refused (grading.imported_instead_of_written), by the name of where it came from; the stubs,
written in exercises/, pass this check (and then fail on their NotImplementedError)."""
from __future__ import annotations

import types

import pytest
from grading import imported_instead_of_written, reference_lesson

from minicb import course
from minicb.kv.paged_allocator import PagedAllocator
from minicb.scheduler.preemption import choose_victim, should_swap
from minicb.serve.stream_metrics import stream_metrics

TASKS = {(t.lesson, t.number): t for t in course.TASKS}


def lesson_module(name: str, **functions) -> types.ModuleType:
    """A stand-in for exercises/<name>.py holding `functions` (a function defined here counts as written there)."""
    module = types.ModuleType(f"exercises.{name}")
    for symbol, fn in functions.items():
        setattr(module, symbol, fn)
    return module


def written_here(*args):
    return args


written_here.__module__ = "exercises.lesson06_preemption"


@pytest.mark.parametrize("task,module,origin", [
    ((6, 1), lesson_module("lesson06_preemption", choose_victim=choose_victim, should_swap=should_swap),
     "minicb.scheduler.preemption"),
    ((6, 1), lesson_module("lesson06_preemption", choose_victim=written_here, should_swap=should_swap),
     "minicb.scheduler.preemption"),
    ((9, 1), lesson_module("lesson09_serving", stream_metrics=stream_metrics), "minicb.serve.stream_metrics"),
    ((4, 1), lesson_module("lesson04_paged_kv", PagedAllocator=PagedAllocator), "minicb.kv.paged_allocator"),
])
def test_a_function_imported_under_the_tasks_name_is_refused_by_where_it_came_from(task, module, origin):
    problem = imported_instead_of_written(TASKS[task], module)
    assert problem and f"is {origin}'s, imported" in problem, problem


@pytest.mark.parametrize("task", list(TASKS.values()), ids=lambda t: f"lesson{t.lesson:02d}_task{t.number}")
def test_the_stubs_are_written_in_their_files(task):
    assert imported_instead_of_written(task, course.lesson(task.module, "exercises")) is None


def test_a_check_whose_bar_is_the_reference_answer_skips_in_words_where_solutions_is_missing():
    """A held-out trial's checkout has no solutions/: the outcome checks that need the reference's result skip,
    naming the file and how to bring it back, instead of a raw ModuleNotFoundError."""
    with pytest.raises(pytest.skip.Exception, match=r"solutions/lesson99_absent\.py, which this checkout lacks"):
        reference_lesson("lesson99_absent")
    assert reference_lesson("lesson08_capstone").__name__ == "solutions.lesson08_capstone"
