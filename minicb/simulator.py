"""The simulator: the engine's scheduling, run against a step-cost model instead of the network.

SimulatedRunner stands where ModelRunner stands and takes the same FlatBatch, so every line of
scheduling, block management and batch building is shared with real runs. Two things differ:
the time a step takes comes from a cost model, and the next token comes from a deterministic
stand-in (never EOS, so lengths are set by max_tokens). Lessons use it to run thousands of
requests in seconds, with exact and repeatable numbers.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from minicb.batch import FlatBatch
from minicb.model.config import read_model_config
from minicb.model.loader import resolve_model_path
from minicb.runner import load_tokenizer


@dataclass(frozen=True)
class StepCost:
    """Seconds per step = fixed + per_token * tokens computed + per_context_token * context read.

    fixed is the per-step overhead (launches, Python), per_token the weight-bound work that grows
    with the tokens in the batch, per_context_token the attention reads over every KV cached.
    The defaults were fitted by bench/fit_step_cost.py on Bard, fp32, 2 CPU cores (683 steps,
    median error 5%). On a CPU a step costs about its token count; on a GPU, decode is bound by
    memory bandwidth and per_token is far smaller relative to fixed.
    """
    fixed: float = 2.9e-3
    per_token: float = 2.7e-4
    per_context_token: float = 1.4e-6
    per_swapped_token: float = 1.0e-6   # one direction of a swap; bench/pressure.py: ~2 us/token out + in

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        return self.fixed + self.per_token * num_tokens + self.per_context_token * context_tokens


def fit_step_cost(steps: list[dict]) -> StepCost:
    """Least-squares fit of StepCost to real steps (trace rows with duration, num_tokens, context_tokens)."""
    x = torch.tensor([[1.0, s["num_tokens"], s["context_tokens"]] for s in steps], dtype=torch.float64)
    y = torch.tensor([s["duration"] for s in steps], dtype=torch.float64)
    coef = torch.linalg.lstsq(x, y[:, None]).solution[:, 0].clamp(min=0).tolist()
    return StepCost(*coef)


class SimulatedRunner:
    """A ModelRunner look-alike: same inputs, a cost model for time, a stand-in for tokens."""

    def __init__(self, model: str | Path | None = None, cost: StepCost | None = None, num_blocks: int = 512,
                 block_size: int = 16, num_swap_blocks: int = 0):
        self.model_path = resolve_model_path(model)
        self.config = read_model_config(self.model_path)   # shapes and limits only; no weights load
        self.tokenizer = load_tokenizer(self.model_path)  # prompts are encoded; outputs stay token ids
        self.device = torch.device("cpu")
        self.cost = cost or StepCost()
        self.num_blocks, self.block_size, self.num_swap_blocks = num_blocks, block_size, num_swap_blocks
        self.now = 0.0
        eos = list(self.config.eos_token_ids)
        self._allowed = torch.tensor([t for t in range(self.config.vocab_size) if t not in eos])

    def clock(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        """Idle until t (the next arrival): simulated time does not pass by itself."""
        self.now = max(self.now, t)

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        self.now += len(pairs) * self.block_size * self.cost.per_swapped_token

    swap_in = swap_out   # a copy costs the same either way

    def execute(self, batch: FlatBatch) -> torch.Tensor:
        """One-hot 'logits' for a stand-in next token, a function of the last token and its position,
        so a request's tokens never depend on its batch, just like the real model's."""
        self.now += self.cost(batch.num_tokens, int(batch.attn.seq_lens.sum()))
        last = batch.input_ids[batch.logits_indices]
        pos = batch.positions[batch.logits_indices]
        pick = self._allowed[(last * 31 + pos * 17) % len(self._allowed)]
        logits = torch.zeros(len(pick), self.config.vocab_size)
        logits[torch.arange(len(pick)), pick] = 1.0
        return logits
