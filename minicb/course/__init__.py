"""The exercise seam: whose code runs in a lesson, yours or the reference.

One switch, read here and nowhere else: the environment variable MINICB_IMPL.
- "exercises" (a learner's default): exercises/lessonNN_topic.py, the stubs you fill in;
- "solutions" (what `make test` uses): solutions/lessonNN_topic.py, the reference.
Both files have the same names and signatures. A stub raises NotImplementedError("Lesson NN, task M:
..."); until you replace it, the engine runs the reference in its place, so a lesson always runs from
top to bottom. The lesson you are on says which of its parts are yours (again whenever that changes):

    from minicb import course
    mine = course.lesson("lesson06_preemption")        # the module MINICB_IMPL picks
    course.attempt(mine.should_swap, victim, "swap", None)   # your function, or a note on what to do
    llm = course.llm(lesson=6, max_num_seqs=8)         # the real engine running your parts
    # Lesson 06 runs exercises/lesson06_preemption.py: choose_victim (yours), should_swap (not written
    # yet: the reference runs; write it, then: pytest tests/exercises -k lesson06_task1)

An edited exercise file takes effect without restarting the kernel: the next course.lesson(), llm(),
engine() or parts() re-imports it (engines built before keep the code they were built with). A file
that does not import breaks its own lesson only: course.lesson() raises its error, and other lessons'
engines run the reference in its place, saying so in one line that names the file and the line.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import inspect
import linecache
import os
import re
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from minicb.course.checkout import REPO_ROOT, find_repo_root
from minicb.course.contracts import checked
from minicb.course.pool_rules import explaining
from minicb.course.predictions import predict, record, reveal
from minicb.engine import LLMEngine
from minicb.llm import LLM
from minicb.parts import EngineParts

IMPL_VARIABLE = "MINICB_IMPL"
IMPLS = ("exercises", "solutions")




@dataclass(frozen=True)
class Task:
    lesson: int
    number: int
    module: str    # exercises/<module>.py and solutions/<module>.py
    symbol: str
    what: str
    also: tuple[str, ...] = ()   # the task's other functions, written along with `symbol`
    grows: str = ""   # the label of the task whose function this one grows (its stub raises that task's label)

    @property
    def label(self) -> str:
        return f"Lesson {self.lesson:02d}, task {self.number}"

    @property
    def stub(self) -> str:
        """The label the task's stub raises."""
        return self.grows or self.label

    @property
    def command(self) -> str:
        return f"pytest tests/exercises -k lesson{self.lesson:02d}_task{self.number}"

    @property
    def symbols(self) -> tuple[str, ...]:
        return (self.symbol, *self.also)

    @property
    def name(self) -> str:
        """What the task writes, in a word: its class when every function is one class's method, else its functions;
        where it grows another lesson's function, that function and its file."""
        if self.grows:
            return f"{self.symbol} in {self.module}.py"
        owners = {s.split(".")[0] for s in self.symbols if "." in s}
        if len(owners) == 1 and all("." in s for s in self.symbols):
            return owners.pop()
        return ", ".join(self.symbols)


TASKS = [
    Task(2, 1, "lesson02_continuous", "plan_step",
         "the step's plan: who runs and who starts"),
    Task(3, 1, "lesson03_selective", "build_flat_batch", "the flat batch the model runs on"),
    Task(4, 1, "lesson04_paged_kv", "PagedAllocator.allocate",
         "the allocator: blocks for a new sequence, a new block only when the last one is full, every block back",
         also=("PagedAllocator.can_allocate", "PagedAllocator.can_append", "PagedAllocator.append_slots",
               "PagedAllocator.free")),
    Task(4, 2, "lesson04_paged_kv", "size_kv_pool", "a block size and a pool size for a workload"),
    Task(4, 3, "lesson02_continuous", "plan_step", "your plan_step, grown: newcomers start only while the pool "
         "holds them", grows="Lesson 02, task 1"),
    Task(5, 1, "lesson05_triton", "paged_decode_attention", "a paged decode attention kernel"),
    Task(6, 1, "lesson06_preemption", "choose_victim",
         "which running request gives its KV blocks back, and whether they are swapped or recomputed",
         also=("should_swap",)),
    Task(6, 2, "lesson06_preemption", "choose_victim_for_latency",
         "a victim policy that lowers the mean and keeps the tail"),
    Task(6, 3, "lesson02_continuous", "plan_step", "your plan_step, grown: running requests give way when the pool "
         "is short", grows="Lesson 02, task 1"),
    Task(7, 1, "lesson07_slo", "chunk_size", "how many of a request's tokens run this step"),
    Task(7, 2, "lesson07_slo", "slo_config", "a configuration that meets the SLO"),
    Task(7, 3, "lesson02_continuous", "plan_step", "your plan_step, grown: chunks, and prefill first or decode "
         "first", grows="Lesson 02, task 1"),
    Task(8, 1, "lesson08_capstone", "capstone", "a configuration and the highest rate at which it meets the SLO"),
    Task(9, 1, "lesson09_serving", "stream_metrics", "TTFT, ITL, TPOT and e2e from a stream's chunk times"),
    Task(10, 1, "lesson10_prefix_cache", "block_hashes",
         "the chain hash of each full block, and how many leading blocks the cache holds",
         also=("longest_cached_prefix",)),
    Task(10, 2, "lesson10_prefix_cache", "choose_eviction",
         "which cached block to evict: more hits than LRU, also when the hot set changes"),
]

# The EngineParts fields a task's functions fill (each function's name is the field's). Lesson 04's task 1 is
# the methods of one class, which fills the `allocator` field. Lesson 04's size_kv_pool, lesson 06's
# choose_victim_for_latency, lesson 07's slo_config, lesson 08's capstone and lesson 09's stream_metrics (the
# benchmark client's, not the engine's) are graded on their own, and so is lesson 10's choose_eviction: the
# lesson's figures are least recently used's, and its task cell plugs yours in.
FUNCTION_PARTS = ("plan_step", "build_flat_batch", "paged_decode_attention", "choose_victim",
                  "should_swap", "chunk_size", "block_hashes", "longest_cached_prefix")
ALLOCATOR_LESSON, ALLOCATOR_MODULE, ALLOCATOR_CLASS = 4, "lesson04_paged_kv", "PagedAllocator"


def impl() -> str:
    name = os.environ.get(IMPL_VARIABLE, "exercises")
    if name not in IMPLS:
        raise ValueError(f"{IMPL_VARIABLE}={name!r} is unknown: use 'exercises' (your code) or 'solutions' "
                         "(the reference)")
    return name


class CheckoutError(ImportError):
    """The course does not run from a checkout of its own: no exercises/ there, or exercises/ (solutions/)
    imported from another one. Every lesson's, not one file's, so parts() never stands in for it."""


# The source each lesson module last ran, as a digest of its file, by module name: a file whose digest
# differs was edited since, and lesson() re-imports it.
_RAN: dict[str, str] = {}


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def lesson(module: str, which: str | None = None) -> ModuleType:
    """exercises.<module> or solutions.<module> of REPO_ROOT, as MINICB_IMPL (or `which`) says; re-imported
    in place when its file changed since it was imported, so the module you hold and every engine built
    after run the file as it is now. Raises the file's own error (a SyntaxError ...) when it does not import."""
    which = which or impl()
    if not (REPO_ROOT / "exercises").is_dir():
        raise CheckoutError("exercises/ and solutions/ live in a git checkout of minicb; run the course from one "
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
        raise CheckoutError(f"{which} is already imported from {where}, not from this checkout's {folder}: "
                            f"restart the kernel (or Python) and run from {REPO_ROOT}")
    name = f"{which}.{module}"
    path = folder / f"{module}.py"
    now = _digest(path)
    imported = sys.modules.get(name)
    if imported is None:
        importlib.invalidate_caches()   # a file written since its folder was last listed
        imported = importlib.import_module(name)
    elif now != _RAN.setdefault(name, now):   # first seen here, imported by someone else: taken as it is now
        # Python's cached bytecode is keyed on the file's mtime in whole seconds and its size: an edit within
        # the second that keeps the size would run the old code again. The source lines inspect shows (and
        # is_stub reads) are cached the same way.
        Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)
        linecache.clearcache()
        importlib.reload(imported)
    _RAN[name] = now
    return imported


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


# What this process last said about a lesson's parts (by lesson number) and about a file that does not
# import (by module): a note is said again when what it says changes (a part written, a stub put back, the
# file broken or fixed), not for each of the engines a loop builds on the same code.
_SAID: dict[int | str, str] = {}


def _say_when_changed(key: int | str, text: str) -> None:
    if _SAID.get(key) != text:
        _SAID[key] = text
        print(text)


def with_fallback(mine: Callable, reference: Callable) -> Callable:
    """Your part while it works; the reference from the first time it raises a stub's error (a function
    written only in part), saying so then. Every part made says it: each engine course.llm() or engine()
    builds (each parts() call) has its own, so a second engine, or the same function broken again after a
    fix, is reported again, while one engine's thousand calls are reported once."""
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
                print(f"{not_yet(error)}. Meanwhile the engine runs the reference.")
        return reference(*args, **kwargs)
    return part


def _state(task: Task, stubs: list[str]) -> str:
    """How a lesson's note shows the task's functions, `stubs` of them still stubs: one entry for what
    is yours and one for what is not written yet, so a task of two functions is not announced twice."""
    written = [s for s in task.symbols if s not in stubs]
    shown = [f"{_listed(written)} (yours)"] if written else []
    if stubs:
        shown.append(f"{_listed(stubs)} (not written yet: the reference runs; write "
                     f"{'it' if len(stubs) == 1 else 'them'}, then: {task.command})")
    return ", ".join(shown)


def _listed(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def parts(which: str | None = None, decode_kernel: bool = False, *, lesson: int | None = None) -> EngineParts:
    """The engine's lesson parts from exercises/ or solutions/, each stub replaced by minicb's own, and each
    other part checked against its contract (minicb/course/contracts.py).
    decode_kernel: also lesson 05's kernel (it needs Triton). With exercises/, `lesson`'s note says which
    of its parts are yours (every lesson's, when None), again whenever that changes; other lessons' stubs
    are replaced silently, being their own lessons' business. A lesson file that does not import raises
    its error for its own lesson; any other lesson runs the reference in its place, saying so."""
    which = which or impl()
    noted = {t.lesson for t in TASKS} if lesson is None else {lesson}
    reference = EngineParts()
    plugged: dict[str, Any] = {}
    stubs: dict[Task, list[str]] = {}   # the tasks this engine runs: their functions that are still stubs
    for task in (t for t in TASKS if not t.grows):
        symbols = [s for s in task.symbols if s in FUNCTION_PARTS and (s != "paged_decode_attention" or decode_kernel)]
        if not symbols:
            continue
        module = _importable(task.module, which, own=task.lesson == lesson)
        for symbol in symbols:
            ref = getattr(reference, symbol) or _reference_kernel()
            if module is None:
                plugged[symbol] = ref
                continue
            mine = getattr(module, symbol)
            stub = is_stub(mine)
            stubs.setdefault(task, []).extend([symbol] if stub else [])
            plugged[symbol] = ref if stub else with_fallback(mine, ref)
    module = _importable(ALLOCATOR_MODULE, which, own=ALLOCATOR_LESSON == lesson)
    if module is None:
        plugged["allocator"] = reference.allocator
    else:
        plugged["allocator"], allocator_stubs = allocator_class(getattr(module, ALLOCATOR_CLASS), reference.allocator)
        stubs.update(allocator_stubs)
    if which == "exercises":
        for n in sorted(noted):
            shown = [t for t in TASKS if t.lesson == n and t in stubs]
            if shown:
                _say_when_changed(n, f"Lesson {n:02d} runs exercises/{shown[0].module}.py: "
                                     + ", ".join(_state(t, stubs[t]) for t in shown))
    # The plan's rules of the lessons before this one are enforced; this lesson's and later ones' steps fall back.
    return checked(EngineParts(**plugged), reached=7 if lesson is None else max(2, lesson - 1))


def _module(module: str, which: str) -> ModuleType:
    return lesson(module, which)   # parts() has a parameter named lesson


def _importable(module: str, which: str, own: bool) -> ModuleType | None:
    """The lesson module, or None where its file does not import and this engine is not its own lesson's,
    saying so in one line (until the file is fixed, or breaks another way). Its own lesson raises the
    file's error: that learner must see it."""
    try:
        imported = _module(module, which)
    except CheckoutError:
        raise
    except Exception as error:   # noqa: BLE001 - whatever a learner's file raises on import, it is theirs
        if own:
            raise
        file = f"{which}/{module}.py"
        number = next(t.lesson for t in TASKS if t.module == module)
        reason = error.msg if isinstance(error, SyntaxError) else error   # its str repeats the file and line
        _say_when_changed(module, f"{file}{_line_of(error, REPO_ROOT / file)} does not import "
                                  f"({type(error).__name__}: {reason}): this engine runs the reference for "
                                  f"lesson {number:02d}'s parts; course.lesson({module!r}) shows the error")
        return None
    _SAID.pop(module, None)   # it imports: a later break is news
    return imported


def _line_of(error: BaseException, path: Path) -> str:
    """" line N": where in `path` the import failed (a syntax error's own line, else the deepest frame in
    that file, the line that imports a broken module included); "" when the file is not on the traceback."""
    here = path.resolve()
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve() == here:
        return f" line {error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    lines = [frame.lineno for frame in frames if Path(frame.filename).resolve() == here]
    return f" line {lines[-1]}" if lines else ""


def _reference_kernel() -> Callable:
    from minicb_kernels import paged_decode_attention  # needs Triton: imported only for attn_backend="triton"

    return paged_decode_attention


def allocator_class(mine: type, reference: type) -> tuple[type, dict[Task, list[str]]]:
    """Your PagedAllocator with, for each task function still a stub, the reference's in its place; a
    written one falls back to the reference's at run time (see with_fallback). Both classes keep the
    same state (free list, tables, counts), so the reference's functions work on your instance. Also
    each lesson 04 task's functions that are still stubs, for the lesson's note."""
    methods: dict[str, Callable] = {}
    stubs: dict[Task, list[str]] = {}
    for task in (t for t in TASKS if t.symbol.startswith(f"{ALLOCATOR_CLASS}.")):
        stubs[task] = [s for s in task.symbols if is_stub(getattr(mine, s.split(".", 1)[1]))]
        for symbol in task.symbols:
            name = symbol.split(".", 1)[1]
            ref = getattr(reference, name)
            methods[name] = ref if symbol in stubs[task] else with_fallback(getattr(mine, name), ref)
    if mine is reference:
        return mine, stubs
    return type(mine.__name__, (mine,), {**methods, "__module__": mine.__module__, "__doc__": mine.__doc__}), stubs


def llm(model: str | None = None, *, lesson: int | None = None, **config: Any) -> LLM:
    """minicb's LLM with this course's parts plugged in (lesson 05's kernel with attn_backend="triton");
    `lesson`: the lesson you are on, whose parts the note lists."""
    made = LLM(model, parts=parts(decode_kernel=config.get("attn_backend") == "triton", lesson=lesson), **config)
    explaining(made.engine)
    return made


def engine(*, lesson: int | None = None, **config: Any) -> LLMEngine:
    """minicb's LLMEngine with this course's parts plugged in; `lesson` as for llm()."""
    return explaining(LLMEngine(parts=parts(decode_kernel=config.get("attn_backend") == "triton", lesson=lesson),
                                **config))
