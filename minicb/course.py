"""The exercise seam: whose code runs in a lesson, yours or the reference.

One switch, read here and nowhere else: the environment variable MINICB_IMPL.
- "exercises" (a learner's default): exercises/lessonNN_topic.py, the stubs you fill in;
- "solutions" (what `make test` uses): solutions/lessonNN_topic.py, the reference.
Both files have the same names and signatures. A stub raises NotImplementedError("Lesson NN, task M:
..."); until you replace it, `course.llm()` runs the reference in its place and says so once, so a
lesson always runs from top to bottom.

    from minicb import course
    mine = course.lesson("lesson02_continuous")        # the module MINICB_IMPL picks
    course.attempt(mine.plan_admissions, queue, 2, 64, 8, True)   # your function, or a note on what to do
    llm = course.llm(max_num_seqs=8)                   # the real engine running your parts
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from minicb.block_manager import PagedAllocator
from minicb.engine import LLM, LLMEngine
from minicb.parts import EngineParts

IMPL_VARIABLE = "MINICB_IMPL"
IMPLS = ("exercises", "solutions")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Task:
    lesson: int
    number: int
    module: str    # exercises/<module>.py and solutions/<module>.py
    symbol: str
    what: str

    @property
    def label(self) -> str:
        return f"Lesson {self.lesson:02d}, task {self.number}"

    @property
    def command(self) -> str:
        return f"pytest tests/exercises -k lesson{self.lesson:02d}_task{self.number}"


TASKS = [
    Task(2, 1, "lesson02_continuous", "requests_that_leave", "the running requests that leave the batch now"),
    Task(2, 2, "lesson02_continuous", "plan_admissions", "which waiting requests start this step"),
    Task(3, 1, "lesson03_selective", "build_flat_batch", "the flat batch the model runs on"),
    Task(4, 1, "lesson04_paged_kv", "PagedAllocator.allocate", "blocks for a new sequence (with can_allocate)"),
    Task(4, 2, "lesson04_paged_kv", "PagedAllocator.append_slots",
         "a new block only when the last one is full (with can_append)"),
    Task(4, 3, "lesson04_paged_kv", "PagedAllocator.free", "give every block back, on the device or in the swap pool"),
    Task(5, 1, "lesson05_triton", "paged_decode_attention", "a paged decode attention kernel"),
    Task(6, 1, "lesson06_preemption", "choose_victim", "the running request that gives way"),
    Task(6, 2, "lesson06_preemption", "should_swap", "recompute or swap this victim"),
    Task(7, 1, "lesson07_slo", "slo_config", "a configuration that meets the SLO"),
]


def impl() -> str:
    name = os.environ.get(IMPL_VARIABLE, "exercises")
    if name not in IMPLS:
        raise ValueError(f"{IMPL_VARIABLE}={name!r} is unknown: use 'exercises' (your code) or 'solutions' "
                         "(the reference)")
    return name


def lesson(module: str, which: str | None = None) -> ModuleType:
    """exercises.<module> or solutions.<module>, as MINICB_IMPL (or `which`) says."""
    if not (REPO_ROOT / "exercises").is_dir():
        raise ImportError("exercises/ and solutions/ live in a git checkout of minicb; run the course from one "
                          "(git clone ..., then make lab)")
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(f"{which or impl()}.{module}")


def is_stub_error(error: NotImplementedError) -> bool:
    return str(error).startswith("Lesson ")


def not_yet(error: NotImplementedError) -> str:
    t = next(t for t in TASKS if str(error).startswith(t.label + ":"))
    return (f"not implemented yet: {t.label} ({t.what}): write exercises/{t.module}.py::{t.symbol}, "
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


def with_fallback(mine: Callable, reference: Callable, noted: set[str] | None = None) -> Callable:
    """Your part while it works; the reference, with a note printed once, while it is a stub.
    noted: the task labels already announced, shared by parts of one task so it is named once."""
    if mine == reference:   # the reference itself (a bound classmethod is a new object at each access)
        return mine
    noted = set() if noted is None else noted
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
                label = str(error).split(":")[0]
                if label not in noted:
                    noted.add(label)
                    print(f"{not_yet(error)}. Meanwhile the engine runs the reference.")
        return reference(*args, **kwargs)
    return part


def allocator_class(mine: type) -> type:
    """Your PagedAllocator, each lesson method falling back to minicb's while it is a stub (minicb's
    methods use only the state your __init__ sets, which is the same)."""
    if mine is PagedAllocator:
        return mine
    noted: set[str] = set()   # can_allocate and allocate are one task: one note
    methods = {name: with_fallback(getattr(mine, name), getattr(PagedAllocator, name), noted)
               for name in ("can_allocate", "allocate", "can_append", "append_slots", "free")}
    return type(mine.__name__, (mine,), methods)


def parts(which: str | None = None, decode_kernel: bool = False) -> EngineParts:
    """The engine's lesson parts from exercises/ or solutions/, each falling back to minicb's own
    while it is still a stub. decode_kernel: also lesson 05's kernel (it needs Triton)."""
    l02, l03, l04, l06 = (lesson(m, which) for m in ("lesson02_continuous", "lesson03_selective",
                                                      "lesson04_paged_kv", "lesson06_preemption"))
    reference = EngineParts()
    decode = None
    if decode_kernel:
        from minicb_kernels import paged_decode_attention

        decode = with_fallback(lesson("lesson05_triton", which).paged_decode_attention, paged_decode_attention)
    return EngineParts(
        requests_that_leave=with_fallback(l02.requests_that_leave, reference.requests_that_leave),
        plan_admissions=with_fallback(l02.plan_admissions, reference.plan_admissions),
        build_flat_batch=with_fallback(l03.build_flat_batch, reference.build_flat_batch),
        allocator=allocator_class(l04.PagedAllocator),
        paged_decode_attention=decode,
        choose_victim=with_fallback(l06.choose_victim, reference.choose_victim),
        should_swap=with_fallback(l06.should_swap, reference.should_swap))


def llm(model: str | None = None, **config: Any) -> LLM:
    """minicb's LLM with this course's parts plugged in (lesson 05's kernel with attn_backend="triton")."""
    return LLM(model, parts=parts(decode_kernel=config.get("attn_backend") == "triton"), **config)


def engine(**config: Any) -> LLMEngine:
    return LLMEngine(parts=parts(decode_kernel=config.get("attn_backend") == "triton"), **config)
