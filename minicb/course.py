"""The exercise seam: whose code runs in a lesson, yours or the reference.

One switch, read here and nowhere else: the environment variable MINICB_IMPL.
- "exercises" (a learner's default): exercises/lessonNN_topic.py, the stubs you fill in;
- "solutions" (what `make test` uses): solutions/lessonNN_topic.py, the reference.
Both files have the same names and signatures. A stub raises NotImplementedError("Lesson NN, task M:
..."); until you replace it, the engine runs the reference in its place, so a lesson always runs from
top to bottom. The lesson you are on says once which of its parts are yours:

    from minicb import course
    mine = course.lesson("lesson02_continuous")        # the module MINICB_IMPL picks
    course.attempt(mine.admit_waiting, sched, step)    # your function, or a note on what to do
    llm = course.llm(lesson=2, max_num_seqs=8)         # the real engine running your parts
    # Lesson 02 runs exercises/lesson02_continuous.py: schedule_running (yours), admit_waiting (not written
    # yet: the reference runs; write it, then: pytest tests/exercises -k lesson02_task2)
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from minicb.engine import LLMEngine
from minicb.llm import LLM
from minicb.parts import EngineParts

IMPL_VARIABLE = "MINICB_IMPL"
IMPLS = ("exercises", "solutions")


def find_repo_root(start: Path | None = None) -> Path:
    """The checkout the course runs in: the nearest folder, from `start` (the working directory)
    upwards, that holds exercises/, solutions/ and minicb/. A notebook runs in notebooks/ and must grade
    the exercises next to it, even where minicb is installed from another checkout; outside any
    checkout, the folder above this package."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / name).is_dir() for name in ("exercises", "solutions", "minicb")):
            return folder
    return Path(__file__).resolve().parent.parent


REPO_ROOT = find_repo_root()


@dataclass(frozen=True)
class Task:
    lesson: int
    number: int
    module: str    # exercises/<module>.py and solutions/<module>.py
    symbol: str
    what: str
    also: tuple[str, ...] = ()   # the task's other functions, written along with `symbol`

    @property
    def label(self) -> str:
        return f"Lesson {self.lesson:02d}, task {self.number}"

    @property
    def command(self) -> str:
        return f"pytest tests/exercises -k lesson{self.lesson:02d}_task{self.number}"

    @property
    def symbols(self) -> tuple[str, ...]:
        return (self.symbol, *self.also)


TASKS = [
    Task(2, 1, "lesson02_continuous", "schedule_running",
         "give each running request its tokens this step (decode first)"),
    Task(2, 2, "lesson02_continuous", "admit_waiting", "start waiting requests, first come first served"),
    Task(3, 1, "lesson03_selective", "build_flat_batch", "the flat batch the model runs on"),
    Task(4, 1, "lesson04_paged_kv", "PagedAllocator.allocate", "blocks for a new sequence",
         also=("PagedAllocator.can_allocate",)),
    Task(4, 2, "lesson04_paged_kv", "PagedAllocator.append_slots", "a new block only when the last one is full",
         also=("PagedAllocator.can_append",)),
    Task(4, 3, "lesson04_paged_kv", "PagedAllocator.free", "give every block back, on the device or in the swap pool"),
    Task(5, 1, "lesson05_triton", "paged_decode_attention", "a paged decode attention kernel"),
    Task(6, 1, "lesson06_preemption", "make_room", "preempt the least urgent running request"),
    Task(6, 2, "lesson06_preemption", "should_swap", "recompute or swap this victim"),
    Task(7, 1, "lesson07_slo", "chunk_size", "how many of a request's tokens run this step"),
    Task(7, 2, "lesson07_slo", "slo_config", "a configuration that meets the SLO"),
    Task(8, 1, "lesson08_capstone", "capstone", "a configuration and the highest rate at which it meets the SLO"),
    Task(9, 1, "lesson09_serving", "stream_metrics", "TTFT, ITL, TPOT and e2e from a stream's chunk times"),
    Task(10, 1, "lesson10_prefix_cache", "block_hashes", "the chain hash of each full block"),
    Task(10, 2, "lesson10_prefix_cache", "longest_cached_prefix", "how many leading blocks the cache holds"),
    Task(10, 3, "lesson10_prefix_cache", "choose_eviction", "which cached block to evict: more hits than LRU"),
]

# The EngineParts fields a task's function fills (its symbol is the field's name). Lesson 04's tasks are
# the methods of one class, which fills the `allocator` field. Lesson 07's slo_config, lesson 08's capstone
# and lesson 09's stream_metrics (the benchmark client's, not the engine's) are graded on their own, and so is
# lesson 10's choose_eviction: the lesson's figures are least recently used's, and its task cell plugs yours in.
FUNCTION_PARTS = ("schedule_running", "admit_waiting", "build_flat_batch", "paged_decode_attention", "make_room",
                  "should_swap", "chunk_size", "block_hashes", "longest_cached_prefix")
ALLOCATOR_LESSON, ALLOCATOR_MODULE, ALLOCATOR_CLASS = 4, "lesson04_paged_kv", "PagedAllocator"


def impl() -> str:
    name = os.environ.get(IMPL_VARIABLE, "exercises")
    if name not in IMPLS:
        raise ValueError(f"{IMPL_VARIABLE}={name!r} is unknown: use 'exercises' (your code) or 'solutions' "
                         "(the reference)")
    return name


def lesson(module: str, which: str | None = None) -> ModuleType:
    """exercises.<module> or solutions.<module> of REPO_ROOT, as MINICB_IMPL (or `which`) says."""
    which = which or impl()
    if not (REPO_ROOT / "exercises").is_dir():
        raise ImportError("exercises/ and solutions/ live in a git checkout of minicb; run the course from one "
                          "(git clone ..., then make lab)")
    # An editable install puts its own checkout on sys.path, so another checkout's `exercises` may be
    # importable too: this one goes first.
    root = str(REPO_ROOT)
    if sys.path[:1] != [root]:
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    # One that is already imported from elsewhere is refused, not reloaded: the engines and functions made
    # from it would keep running the other checkout's code beside this one's.
    loaded = sys.modules.get(which)
    folder = (REPO_ROOT / which).resolve()
    if loaded is not None and folder not in [Path(p).resolve() for p in getattr(loaded, "__path__", [])]:
        where = ", ".join(getattr(loaded, "__path__", [])) or loaded
        raise ImportError(f"{which} is already imported from {where}, not from this checkout's {folder}: "
                          f"restart the kernel (or Python) and run from {REPO_ROOT}")
    return importlib.import_module(f"{which}.{module}")


def stub_label(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """"Lesson NN, task M" while a function is its stub: its first statement (after a docstring) is
    `raise NotImplementedError("Lesson NN, task M: ...")`, so it always raises; None once that line is
    gone or anything is written before it. What follows the raise never runs (lesson 05's stub keeps its
    written launch code there), so it does not count."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body or not isinstance(body[0], ast.Raise):
        return None
    call = body[0].exc
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError"
            and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
        return None
    label = re.match(r"Lesson \d\d, task \d+(?=:)", call.args[0].value)
    return label.group(0) if label else None


def is_stub(fn: Callable) -> bool:
    """Whether fn is still its stub, read from its source: calling it is no probe (a kernel or an
    allocator method needs real arguments, and may change state before it fails)."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError):   # no source (a notebook cell's, a lambda's): with_fallback covers it
        return False
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and stub_label(node) is not None


def is_stub_error(error: NotImplementedError) -> bool:
    return str(error).startswith("Lesson ")


def not_yet(error: NotImplementedError) -> str:
    t = next(t for t in TASKS if str(error).startswith(t.label + ":"))
    # The stub that raised, when the message names one of the task's functions (a task may have two).
    raised = next((s for s in t.symbols if str(error).startswith(f"{t.label}: {s}:")), t.symbol)
    return (f"not implemented yet: {t.label} ({t.what}): write exercises/{t.module}.py::{raised}, "
            f"then check it with: {t.command}")


def attempt(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), or, while fn is still a stub, a note saying which task it is and how to
    check it (and None)."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as error:
        if not is_stub_error(error):
            raise
        print(not_yet(error))
        return None


# What this process has said already: a lesson's note (by lesson number), a run-time fallback (by task label).
_SAID: set[int | str] = set()


def _say_once(key: int | str, text: str) -> None:
    if key not in _SAID:
        _SAID.add(key)
        print(text)


def with_fallback(mine: Callable, reference: Callable, quiet: bool = False) -> Callable:
    """Your part while it works; the reference from the first time it raises a stub's error (a function
    written only in part), saying so once unless `quiet`."""
    if mine == reference:   # the reference itself (a bound classmethod is a new object at each access)
        return mine
    fell_back = False

    @functools.wraps(mine)
    def part(*args, **kwargs):
        nonlocal fell_back
        if not fell_back:
            try:
                return mine(*args, **kwargs)
            except NotImplementedError as error:
                if not is_stub_error(error):
                    raise
                fell_back = True
                if not quiet:
                    _say_once(str(error).split(":")[0], f"{not_yet(error)}. Meanwhile the engine runs the reference.")
        return reference(*args, **kwargs)
    return part


def _state(task: Task, stubs: list[str]) -> str:
    """How a lesson's note shows the task's functions, `stubs` of them still stubs: one entry for what
    is yours and one for what is not written yet, so a task of two functions is not announced twice."""
    written = [s for s in task.symbols if s not in stubs]
    shown = [f"{' and '.join(written)} (yours)"] if written else []
    if stubs:
        shown.append(f"{' and '.join(stubs)} (not written yet: the reference runs; write "
                     f"{'it' if len(stubs) == 1 else 'them'}, then: {task.command})")
    return ", ".join(shown)


def parts(which: str | None = None, decode_kernel: bool = False, *, lesson: int | None = None) -> EngineParts:
    """The engine's lesson parts from exercises/ or solutions/, each stub replaced by minicb's own.
    decode_kernel: also lesson 05's kernel (it needs Triton). With exercises/, `lesson`'s note says once
    per process which of its parts are yours (every lesson's, when None); other lessons' stubs are
    replaced silently, being their own lessons' business."""
    which = which or impl()
    noted = {t.lesson for t in TASKS} if lesson is None else {lesson}
    reference = EngineParts()
    plugged: dict[str, Any] = {}
    stubs: dict[Task, list[str]] = {}   # the tasks this engine runs: their functions that are still stubs
    for task in TASKS:
        if task.symbol not in FUNCTION_PARTS or (task.symbol == "paged_decode_attention" and not decode_kernel):
            continue
        mine = getattr(_module(task.module, which), task.symbol)
        ref = getattr(reference, task.symbol) or _reference_kernel()
        stubs[task] = [task.symbol] if is_stub(mine) else []
        plugged[task.symbol] = ref if stubs[task] else with_fallback(mine, ref, quiet=task.lesson not in noted)
    allocator = getattr(_module(ALLOCATOR_MODULE, which), ALLOCATOR_CLASS)
    plugged["allocator"], allocator_stubs = allocator_class(allocator, reference.allocator,
                                                            quiet=ALLOCATOR_LESSON not in noted)
    stubs.update(allocator_stubs)
    if which == "exercises":
        for n in sorted(noted):
            shown = [t for t in TASKS if t.lesson == n and t in stubs]
            if shown:
                _say_once(n, f"Lesson {n:02d} runs exercises/{shown[0].module}.py: "
                             + ", ".join(_state(t, stubs[t]) for t in shown))
    return EngineParts(**plugged)


def _module(module: str, which: str) -> ModuleType:
    return lesson(module, which)   # parts() has a parameter named lesson


def _reference_kernel() -> Callable:
    from minicb_kernels import paged_decode_attention  # needs Triton: imported only for attn_backend="triton"

    return paged_decode_attention


def allocator_class(mine: type, reference: type, quiet: bool = False) -> tuple[type, dict[Task, list[str]]]:
    """Your PagedAllocator with, for each task function still a stub, the reference's in its place; a
    written one falls back to the reference's at run time (see with_fallback). Both classes keep the
    same state (free list, tables, counts), so the reference's functions work on your instance. Also
    each lesson 04 task's functions that are still stubs, for the lesson's note."""
    methods: dict[str, Callable] = {}
    stubs: dict[Task, list[str]] = {}
    for task in (t for t in TASKS if t.module == ALLOCATOR_MODULE):
        stubs[task] = [s for s in task.symbols if is_stub(getattr(mine, s.split(".", 1)[1]))]
        for symbol in task.symbols:
            name = symbol.split(".", 1)[1]
            ref = getattr(reference, name)
            methods[name] = ref if symbol in stubs[task] else with_fallback(getattr(mine, name), ref, quiet=quiet)
    if mine is reference:
        return mine, stubs
    return type(mine.__name__, (mine,), {**methods, "__module__": mine.__module__, "__doc__": mine.__doc__}), stubs


def llm(model: str | None = None, *, lesson: int | None = None, **config: Any) -> LLM:
    """minicb's LLM with this course's parts plugged in (lesson 05's kernel with attn_backend="triton");
    `lesson`: the lesson you are on, whose parts the note lists."""
    return LLM(model, parts=parts(decode_kernel=config.get("attn_backend") == "triton", lesson=lesson), **config)


def engine(*, lesson: int | None = None, **config: Any) -> LLMEngine:
    """minicb's LLMEngine with this course's parts plugged in; `lesson` as for llm()."""
    return LLMEngine(parts=parts(decode_kernel=config.get("attn_backend") == "triton", lesson=lesson), **config)
