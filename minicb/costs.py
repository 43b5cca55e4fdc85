"""What steps and preemptions cost, in seconds: the simulator's clock and "auto" preemption's choice.
A leaf module (it imports nothing from minicb), so config, simulator, runner and scheduler can all use it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class CostModel(Protocol):
    """What the simulator and "auto" preemption need: StepCost (fitted on this CPU) and
    minicb.lab.hardware.RooflineCost (a modelled GPU) both meet it."""
    @property
    def per_swapped_token(self) -> float:
        """Seconds per token of KV copied one way between the device and the CPU swap pool."""

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        """Seconds for one step computing num_tokens tokens that read context_tokens of KV in all."""

    def copy_s(self, tokens: int) -> float:
        """Seconds to copy `tokens` tokens' KV one way (a swap out or a swap in)."""

    def preemption_cost(self) -> PreemptionCost:
        """What "auto" compares: the prices of bringing a victim back by recompute or by swap."""


@dataclass(frozen=True)
class StepCost:
    """Step seconds = fixed (launches, Python) + per_token * tokens computed + per_context_token * KV read.
    Defaults fitted by bench/fit_step_cost.py on Bard, fp32, 2 CPU cores, eager: 941 steps, median error 4%
    (2026-12-01). For a GPU (decode bound by memory bandwidth), use minicb.lab.hardware.RooflineCost."""
    fixed: float = 1.86e-3
    per_token: float = 2.2e-4
    per_context_token: float = 1.2e-6
    per_swapped_token: float = 1.0e-6   # one direction of a swap; bench/pressure.py: ~2 us/token out + in

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        return self.fixed + self.per_token * num_tokens + self.per_context_token * context_tokens

    def copy_s(self, tokens: int) -> float:
        return self.per_swapped_token * tokens   # a memcpy within RAM: no latency worth fitting

    def preemption_cost(self) -> PreemptionCost:
        """Recompute: one step of t tokens reading t of context (linear in t); swap: one copy each way.
        On this CPU, swapping is cheaper at any length."""
        return PreemptionCost(self.fixed, self.per_token + self.per_context_token, 0.0,
                              0.0, 2 * self.per_swapped_token)


@dataclass(frozen=True)
class PreemptionCost:
    """Seconds to bring back a victim with t tokens of context: recompute a + b*t + c*t^2, swap d + e*t
    (out and back). Every price is finite and >= 0, so recompute - swap is convex in t: swap is cheaper on
    at most two ranges, one from 0 tokens and one that never ends, with recompute cheaper between."""
    recompute_fixed: float
    recompute_per_token: float
    recompute_per_token_sq: float
    swap_fixed: float
    swap_per_token: float

    def __post_init__(self):
        for name, value in vars(self).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PreemptionCost.{name} is {value!r}: a price in seconds is a finite "
                                 "number >= 0")

    def recompute_s(self, tokens: int) -> float:
        return (self.recompute_fixed + self.recompute_per_token * tokens
                + self.recompute_per_token_sq * tokens ** 2)

    def swap_s(self, tokens: int) -> float:
        return self.swap_fixed + self.swap_per_token * tokens


def simulated_preemption_cost(step: CostModel | None = None) -> PreemptionCost:
    """The simulator's own prices for "auto" (step: its cost model, None the default StepCost)."""
    return (step or StepCost()).preemption_cost()
