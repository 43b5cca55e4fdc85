"""Workloads: Bard speaker prompts, arrival processes and output-length distributions, and a loop to run them.

Output lengths are natural (the model's own EOS) or drawn and forced with ignore_eos: fixed, uniform, or
heavy-tailed (lognormal with the corpus's median 23 and p90 109 tokens).
"""
from __future__ import annotations

import json
import math
import random
from collections import deque
from dataclasses import dataclass

from tqdm.auto import tqdm

from minicb.model.loader import BARD_PATH
from minicb.sampling import SamplingParams
from minicb.scheduler.request import RequestOutput

CORPUS_MEDIAN, CORPUS_P90 = 23, 109


# The Prologue of Romeo and Juliet: about 230 of Bard's tokens, read before every speaker line in lesson 10.
PROLOGUE = """Two households, both alike in dignity,
In fair Verona, where we lay our scene,
From ancient grudge break to new mutiny,
Where civil blood makes civil hands unclean.
From forth the fatal loins of these two foes
A pair of star-cross'd lovers take their life;
Whose misadventured piteous overthrows
Do with their death bury their parents' strife.
The fearful passage of their death-mark'd love,
And the continuance of their parents' rage,
Which, but their children's end, nought could remove,
Is now the two hours' traffic of our stage;
The which if you with patient ears attend,
What here shall miss, our toil shall strive to mend.

"""


@dataclass
class WorkloadRequest:
    prompt: str | list[int]
    params: SamplingParams
    arrival_time: float = 0.0


def bard_prompts(n: int, seed: int = 0) -> list[str]:
    """Speaker lines drawn as often as the speakers speak in the plays."""
    speakers = json.loads((BARD_PATH / "speakers.json").read_text())
    rng = random.Random(seed)
    return [name + "\n" for name in rng.choices(list(speakers), weights=list(speakers.values()), k=n)]


def arrival_times(n: int, rate: float | None = None, seed: int = 0) -> list[float]:
    """All at time 0 (rate None), or a Poisson process of `rate` requests per second."""
    if rate is None:
        return [0.0] * n
    rng, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        times.append(t)
    return times


def output_lengths(n: int, kind: str, seed: int = 0, fixed: int = 32, low: int = 1, high: int = 256,
                   max_len: int = 512) -> list[int]:
    rng = random.Random(seed)
    if kind == "fixed":
        return [fixed] * n
    if kind == "uniform":
        return [rng.randint(low, high) for _ in range(n)]
    if kind == "heavy":
        sigma = math.log(CORPUS_P90 / CORPUS_MEDIAN) / 1.2816   # 1.2816: the standard normal's p90
        return [min(max_len, max(1, round(rng.lognormvariate(math.log(CORPUS_MEDIAN), sigma))))
                for _ in range(n)]
    raise ValueError(f"length kind {kind!r} is unknown; use 'natural', 'fixed', 'uniform' or 'heavy'")


def make_workload(n: int, lengths: str = "natural", rate: float | None = None, seed: int = 0,
                  temperature: float = 0.0, max_tokens: int = 512, **length_args) -> list[WorkloadRequest]:
    prompts = bard_prompts(n, seed)
    times = arrival_times(n, rate, seed)
    if lengths == "natural":
        params = [SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + i)
                  for i in range(n)]
    else:
        params = [SamplingParams(temperature=temperature, max_tokens=k, ignore_eos=True, seed=seed + i)
                  for i, k in enumerate(output_lengths(n, lengths, seed, max_len=max_tokens, **length_args))]
    return [WorkloadRequest(p, sp, t) for p, sp, t in zip(prompts, params, times)]


def with_prologue(workload: list[WorkloadRequest], num_prologues: int | None = 1, prologue: str = PROLOGUE,
                  seed: int = 0) -> list[WorkloadRequest]:
    """Put a long passage before each text prompt. num_prologues=1: the same `prologue` for all; k: k
    passages in turn, `prologue` and k - 1 shuffles of its words; None: a shuffle per request."""
    rng = random.Random(seed)

    def shuffled() -> str:
        words = prologue.split()
        rng.shuffle(words)
        return " ".join(words) + "\n\n"
    passages = [prologue] + [shuffled() for _ in range((num_prologues or 1) - 1)]
    return [WorkloadRequest((passages[i % len(passages)] if num_prologues else shuffled()) + w.prompt,
                            w.params, w.arrival_time) for i, w in enumerate(workload)]


def run_workload(engine, workload: list[WorkloadRequest], progress: bool = True) -> list[RequestOutput]:
    """Add requests at their arrival times (engine clock) and step until all finish.
    Returns each request's final RequestOutput, in workload order."""
    t0 = engine.clock()
    pending = deque(sorted(range(len(workload)), key=lambda i: workload[i].arrival_time))
    ids: dict[str, int] = {}
    results: dict[int, RequestOutput] = {}
    with tqdm(total=len(workload), desc="requests", disable=not progress, unit="req") as bar:
        while len(results) < len(workload):
            while pending and workload[pending[0]].arrival_time + t0 <= engine.clock():
                i = pending.popleft()
                w = workload[i]
                ids[engine.add_request(w.prompt, w.params, arrival_time=t0 + w.arrival_time)] = i
            if not engine.has_unfinished_requests() and pending:
                engine.idle_until(t0 + workload[pending[0]].arrival_time)
                continue
            for out in engine.step():
                if out.finished and out.request_id in ids:
                    results[ids[out.request_id]] = out
                    bar.update()
    return [results[i] for i in range(len(workload))]


def hot_and_cold_prompts(seed: int, num_requests: int = 200, num_hot: int = 3, prologue_tokens: int = 16,
                         hot_share: float = 0.5, vocab_size: int = 2000, phases: int = 1) -> list[list[int]]:
    """Token-id prompts to measure an eviction policy on (lesson 10, task 2). Each starts with one of num_hot
    shared prologues (probability hot_share) or a cold one of its own, then a 1-6 token tail. phases > 1
    splits the requests into equal parts with their own hot prologues (as when a new system prompt ships)."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab_size) for _ in range(n)]

    prompts = []
    for phase in range(phases):
        hot = [tokens(prologue_tokens) for _ in range(num_hot)]
        part = num_requests // phases + (phase < num_requests % phases)
        prompts += [(rng.choice(hot) if rng.random() < hot_share else tokens(prologue_tokens))
                    + tokens(rng.randrange(1, 7)) for _ in range(part)]
    return prompts
