"""What the exercise tests share: engines in a known state, and failures that name the rule."""
from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given, settings

from minicb import course
from minicb.course import REPO_ROOT, Task
from minicb.course.contracts import checked
from minicb.course.pool_rules import explaining
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams


def imported_instead_of_written(task: Task, module: ModuleType) -> str | None:
    """What is wrong when one of the task's functions (or its class) in the lesson's module was imported from
    minicb or the reference instead of written there: such a function passes every check and teaches nothing.
    Lessons 03 and 04 also make minicb's own refuse to run while they grade, so one that only calls it fails."""
    for symbol in task.symbols:
        *owner, name = symbol.split(".")
        where = getattr(module, owner[0]) if owner else module
        for defined in (where, getattr(where, name)):
            origin = getattr(defined, "__module__", module.__name__)
            if defined is not module and origin != module.__name__:
                return (f"{task.label}: exercises/{task.module}.py::{symbol} is {origin}'s, imported: write it in your "
                        "file; the check grades your function, not minicb's own")
    return None


def reference_lesson(module: str) -> ModuleType:
    """solutions.<module>, the reference answer whose result an outcome check uses as its bar. A checkout without
    solutions/ (a held-out trial) skips only the checks that need it, saying so; the others still grade."""
    if not (REPO_ROOT / "solutions" / f"{module}.py").is_file():
        pytest.skip(f"this check's bar is the reference answer's, solutions/{module}.py, which this checkout lacks: "
                    "`git checkout -- solutions` brings it back")
    return course.lesson(module, "solutions")


def require(holds: bool, rule: str) -> None:
    """Fail with the rule alone, where pytest's rewritten assert would follow it with the repr of every object
    the condition reads (a report, a dict of every request's tokens): a learner reading the end of the output
    would see only that."""
    __tracebackhide__ = True
    if not holds:
        raise AssertionError(rule)


def ids(n: int) -> list[int]:
    """A prompt of n token ids."""
    return list(range(10, 10 + n))


def simulated_engine(parts: EngineParts | None = None, reached: int = 7, **config) -> LLMEngine:
    """The engine on the simulator (exact, repeatable tokens), with the pool checked every step, and the parts
    checked against their contracts at the seam, as course.parts() plugs a learner's in (plan_step's up to lesson
    `reached`: minicb's plan runs the steps that need a later one)."""
    return explaining(LLMEngine(parts=checked(parts, reached),
                                **{"device": "cpu", "simulate": True, "check_kv_invariants": True, **config}))


def add(engine: LLMEngine, prompt_lengths: list[int], max_tokens: int = 8, priorities: list[int] | None = None) -> None:
    for i, n in enumerate(prompt_lengths):
        engine.add_request(ids(n), SamplingParams(max_tokens=max_tokens, ignore_eos=True), request_id=chr(97 + i),
                           priority=priorities[i] if priorities else 0)


def obeying(rule: str, fn, *args):
    """Call the graded function; an error it raises becomes a failure that names the rule."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as error:   # noqa: BLE001 - any error is the learner's to see, with the rule
        pytest.fail(f"{rule} (your code raised {type(error).__name__}: {error})")


def run_both(parts: EngineParts, workload: list[tuple[int, int, int]], reached: int = 7,
             **config) -> tuple[LLMEngine, LLMEngine]:
    """The same workload ((prompt length, max_tokens, priority) per request) on the learner's parts
    and on minicb's; every result must come back complete and the same as minicb's."""
    engines = []
    for p in (parts, EngineParts()):
        engine = simulated_engine(p, reached, **config)
        for i, (n, max_tokens, priority) in enumerate(workload):
            engine.add_request(ids(n), SamplingParams(max_tokens=max_tokens, ignore_eos=True), request_id=chr(97 + i),
                               priority=priority)
        results = {}
        for _ in range(2000):
            if not engine.has_unfinished_requests():
                break
            results.update((o.request_id, o.outputs[0].token_ids) for o in engine.step() if o.finished)
        assert not engine.has_unfinished_requests(), "the run did not finish in 2,000 steps: a request starves"
        engine.results = results
        engines.append(engine)
    yours, reference = engines
    for rid, tokens in reference.results.items():
        assert len(yours.results.get(rid, [])) == len(tokens), f"request {rid!r} did not get all its tokens"
        assert yours.results[rid] == tokens, f"request {rid!r} got other tokens than with minicb's parts: KV lost?"
    return yours, reference


def decisions(engine: LLMEngine, what: str) -> list[list[str]]:
    """Per step, the request ids the trace lists under `what` (admitted, preempted, ...)."""
    return [getattr(s, what) for s in engine.trace.steps]


def answer(rule: str, fn, *args):
    """The graded function's answer; an error it raises becomes an AssertionError that names the rule, so
    that hypothesis shrinks the case to the smallest one that breaks it. A stub's NotImplementedError passes
    through: it says which task it is."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as error:   # noqa: BLE001 - any error is the learner's to see, with the rule
        raise AssertionError(f"{rule} (your code raised {type(error).__name__}: {error})") from error


def described(views) -> str:
    """Request views in words, for a failure message."""
    return "; ".join(f"{v.request_id} (priority {v.priority}, arrived at {v.arrival_time:g} as #{v.arrival_index}, "
                     f"{v.num_computed_tokens} of {v.num_tokens} tokens computed)" for v in views)


def contract_test(decision, check, examples: int, **strategies):
    """A test of a decision's contract on random cases: check(decision(), **case) for each case the
    strategies draw. Hypothesis shrinks a failure to its smallest case and reports that one alone. decision
    is called for each run, so that a negative control can hand in another function."""
    @settings(max_examples=examples, report_multiple_bugs=False)
    @given(**strategies)
    def contract(**case):
        check(decision(), **case)
    return contract
