"""What steps and preemptions cost, in seconds: the simulator's clock and the "auto" preemption
mode's choice. A leaf module (it imports no other part of minicb), so the config, the simulator,
the runner and the scheduler can all use it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class CostModel(Protocol):
    """What the simulator's clock and the "auto" preemption mode need from a cost model: StepCost
    (fitted on this CPU) and minicb.lab.hardware.RooflineCost (a GPU, modelled) both meet it."""
    @property
    def per_swapped_token(self) -> float:
        """Seconds per token of KV copied one way between the device and the CPU swap pool."""

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        """Seconds for one step computing num_tokens tokens that read context_tokens of KV in all."""

    def copy_s(self, tokens: int) -> float:
        """Seconds for one copy, one way, of `tokens` tokens' KV (a swap out, or a swap in)."""

    def preemption_cost(self) -> PreemptionCost:
        """The prices "auto" compares: bringing a victim back by recomputing it or by swapping it."""


@dataclass(frozen=True)
class StepCost:
    """Seconds per step = fixed + per_token * tokens computed + per_context_token * context read.

    fixed is the per-step overhead (launches, Python), per_token the weight-bound work that grows
    with the tokens in the batch, per_context_token the attention reads over every KV cached.
    The defaults were fitted by bench/fit_step_cost.py on Bard, fp32, 2 CPU cores, eager (941 steps,
    median error 4%; 2026-12-01, after the leaner step of bench/README.md). On a CPU a step costs
    about its token count; on a GPU, decode is bound by memory bandwidth and costs nearly the same at
    any batch size (minicb.lab.hardware.RooflineCost).
    """
    fixed: float = 1.86e-3
    per_token: float = 2.2e-4
    per_context_token: float = 1.2e-6
    per_swapped_token: float = 1.0e-6   # one direction of a swap; bench/pressure.py: ~2 us/token out + in

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        return self.fixed + self.per_token * num_tokens + self.per_context_token * context_tokens

    def copy_s(self, tokens: int) -> float:
        return self.per_swapped_token * tokens   # a memcpy within RAM: no latency worth fitting

    def preemption_cost(self) -> PreemptionCost:
        """Re-prefilling t tokens is one step of t tokens reading a context of t (linear in t, as
        StepCost prices it); a swap is a copy each way. On this CPU swapping is cheaper at any length."""
        return PreemptionCost(self.fixed, self.per_token + self.per_context_token, 0.0,
                              0.0, 2 * self.per_swapped_token)


def fit_step_cost(steps: list[dict]) -> StepCost:
    """Least-squares fit of StepCost to real steps (trace rows with duration, num_tokens, context_tokens)."""
    x = torch.tensor([[1.0, s["num_tokens"], s["context_tokens"]] for s in steps], dtype=torch.float64)
    y = torch.tensor([s["duration"] for s in steps], dtype=torch.float64)
    coef = torch.linalg.lstsq(x, y[:, None]).solution[:, 0].clamp(min=0).tolist()
    return StepCost(*coef)


@dataclass(frozen=True)
class PreemptionCost:
    """Seconds to bring back a victim with `tokens` of context, either way.

    recompute: a + b*t + c*t^2 (a prefill step: fixed cost, per-token layers, attention's square)
    swap:      d + e*t         (two copies of t tokens' KV, out and back, each with a fixed latency)

    Every price is finite and >= 0, so recompute - swap is convex in t: swap is cheaper on at most two
    ranges, one from 0 tokens and one that never ends, with recompute cheaper between them.
    """
    recompute_fixed: float
    recompute_per_token: float
    recompute_per_token_sq: float
    swap_fixed: float
    swap_per_token: float

    def __post_init__(self):
        for name, value in vars(self).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PreemptionCost.{name} is {value!r}: a price in seconds is a finite number >= 0")

    def recompute_s(self, tokens: int) -> float:
        return self.recompute_fixed + self.recompute_per_token * tokens + self.recompute_per_token_sq * tokens ** 2

    def swap_s(self, tokens: int) -> float:
        return self.swap_fixed + self.swap_per_token * tokens

    def ranges(self) -> list[tuple[int, float, str]]:
        """Where each choice is cheaper: (first, stop, "swap" or "recompute") over every context length
        from 0 tokens, in order, each range ending where the next begins (stop exclusive; inf for the last).
        The ends are exact: swap_s(t) < recompute_s(t) holds for t in a "swap" range and for no other t."""
        # Over whole tokens the gap recompute - swap falls until `turn` and rises from it (convexity), so
        # swap wins on [0, first_loss) and again from first_win on, with recompute between them.
        if self.recompute_per_token_sq > 0:
            lowest = (self.swap_per_token - self.recompute_per_token) / (2 * self.recompute_per_token_sq)
            turn = max(0, math.floor(min(lowest, 2.0 ** 62)) + 1)
        else:
            turn = 0 if self.recompute_per_token >= self.swap_per_token else None   # None: it falls for ever
        def cheaper(tokens: int) -> bool:
            return self.swap_s(tokens) < self.recompute_s(tokens)

        first_loss = _first(lambda t: not cheaper(t), 0, turn)
        if turn is None:
            first_win = math.inf
            first_loss = math.inf if first_loss is None else first_loss
        else:
            first_loss = turn if first_loss is None else first_loss
            found = _first(cheaper, turn, None)
            first_win = math.inf if found is None else found
        spans = [(0, first_loss, "swap"), (first_loss, first_win, "recompute"), (first_win, math.inf, "swap")]
        out: list[tuple[int, float, str]] = []
        for first, stop, choice in spans:
            if first >= stop:
                continue
            if out and out[-1][2] == choice:
                out[-1] = (out[-1][0], stop, choice)
            else:
                out.append((first, stop, choice))
        return out

    def crossover_tokens(self) -> float:
        """The context from which swapping is cheaper for good: 0 if always, inf if never. It says
        nothing of a short range at the start where swap may also win: ranges() gives them all."""
        first, _, choice = self.ranges()[-1]
        return float(first) if choice == "swap" else math.inf

    def describe(self) -> str:
        """The ranges in words, e.g. "swap below 5 tokens, recompute from 5 to 27,999, swap from 28,000"."""
        spans = self.ranges()
        if len(spans) == 1:
            return f"{spans[0][2]} is cheaper at every context length"
        words = []
        for first, stop, choice in spans:
            if first == 0:
                words.append(f"{choice} below {stop:,} tokens")
            elif stop == math.inf:
                words.append(f"{choice} from {first:,}")
            else:
                words.append(f"{choice} from {first:,} to {stop - 1:,}")
        return ", ".join(words)


def _first(holds, lo: int, hi: int | None) -> int | None:
    """The first t in [lo, hi) where `holds` turns true, given that it stays true once it does (hi None:
    unbounded, searched up to 2^62 tokens); None if it never does there."""
    if hi is None:
        hi = max(1, 2 * lo)
        while not holds(hi):
            if hi > 1 << 62:
                return None
            hi *= 2
        hi += 1
    if lo >= hi or not holds(hi - 1):
        return None
    while lo < hi - 1:
        mid = (lo + hi - 1) // 2
        lo, hi = (lo, mid + 1) if holds(mid) else (mid + 1, hi)
    return lo


def simulated_preemption_cost(step: CostModel | None = None) -> PreemptionCost:
    """The simulator's own prices for "auto" (step: its cost model, None the default StepCost)."""
    return (step or StepCost()).preemption_cost()
