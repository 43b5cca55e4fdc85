"""Lesson 02's decision: may a later request start past one that does not fit what the budget has left? Bursts to
try a plan on, and how much later each request starts under it than first come, first served starts it."""
from __future__ import annotations

import random
from collections.abc import Callable

from minicb.course.contracts import checked
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler.plan import StepPlan, StepState

# A burst at a tight budget: mostly short prompts, some of 12 tokens that often do not fit what the decodes leave.
BURST = dict(device="cpu", simulate=True, max_num_seqs=8, num_blocks=512, block_size=4, max_model_len=128,
             max_num_batched_tokens=16)
PRACTICE_SEEDS = (0, 1, 2)
MAX_DELAY_STEPS = 20   # passing a request over may delay its first token by at most this many steps


def burst(seed: int) -> list[tuple[int, int]]:
    """40 requests, all at once: (prompt length, max_tokens) each."""
    rng = random.Random(seed)
    return [(rng.choice([2, 3, 4, 5, 12]), rng.randint(4, 40)) for _ in range(40)]


def first_token_steps(engine: LLMEngine) -> dict[str, int]:
    """The step in which each request started: with whole prompts, the step of its first token."""
    steps: dict[str, int] = {}
    for i, record in enumerate(engine.trace.steps):
        for request_id in record.admitted:
            steps.setdefault(request_id, i)
    return steps


def run_burst(plan_step: Callable[[StepState], StepPlan] | None, seed: int) -> LLMEngine:
    """The burst of `seed` on the simulator, planned by `plan_step` (None: minicb's, first come, first served)."""
    engine = LLMEngine(parts=checked(EngineParts(plan_step=plan_step) if plan_step else None, 2), **BURST)
    for i, (n, max_tokens) in enumerate(burst(seed)):
        engine.add_request(list(range(10, 10 + n)), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                           request_id=f"r{i:02d}")
    while engine.has_unfinished_requests():
        engine.step()
    return engine


def compare(plan_step: Callable[[StepState], StepPlan], seeds: tuple[int, ...] = PRACTICE_SEEDS) -> None:
    """Per burst: the request your plan delays most against first come, first served, and the mean first token."""
    for seed in seeds:
        yours, fcfs = (first_token_steps(run_burst(p, seed)) for p in (plan_step, None))
        worst = max(fcfs, key=lambda r: yours[r] - fcfs[r])
        verdict = "within" if yours[worst] - fcfs[worst] <= MAX_DELAY_STEPS else "over"
        print(f"burst {seed}: {worst} starts {yours[worst] - fcfs[worst]} steps later than first come, first served "
              f"({verdict} {MAX_DELAY_STEPS}); mean start step {sum(yours.values()) / len(yours):.1f} against "
              f"{sum(fcfs.values()) / len(fcfs):.1f}")
