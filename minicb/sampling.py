"""SamplingParams and the sampler: how each request turns its logits into its next token.

Every request owns a torch.Generator. Its random draws therefore depend only on its own seed and
its own history, never on which other requests happen to share the batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 means greedy (argmax)
    top_k: int = -1                   # keep the k most likely tokens; -1 keeps all
    top_p: float = 1.0                # keep the smallest set whose probability reaches top_p
    max_tokens: int = 256             # new tokens at most, EOS included
    stop: list[str] = field(default_factory=list)        # finish when the text contains one; it is cut off
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False          # keep going past EOS: benchmarks use it to force output lengths
    seed: int | None = None           # None: the engine derives one from its own seed and the request id

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> ValueError:
            return ValueError(f"SamplingParams.{name}={getattr(self, name)!r} is invalid: {allowed}")

        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature < float("inf"):
            raise bad("temperature", "use a finite number >= 0 (0 = greedy)")
        if not isinstance(self.top_k, int) or not (self.top_k == -1 or self.top_k >= 1):
            raise bad("top_k", "use -1 (disabled) or an integer >= 1")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise bad("top_p", "use a number in (0, 1]")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise bad("max_tokens", "use an integer >= 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", "use a list of non-empty strings")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "use a list of token ids (integers >= 0)")
        if self.seed is not None and not isinstance(self.seed, int):
            raise bad("seed", "use an integer or None")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0



def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A request's own random stream: its draws depend on nothing but this seed."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """One request's next token from its logits (vocab,), fp32."""
    if params.greedy:
        return int(logits.argmax())
    logits = logits / params.temperature
    if params.top_k != -1 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = logits.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the tokens before it already reach top_p; the top token always stays.
        drop = (cumulative - sorted_logits.softmax(-1)) >= params.top_p
        logits = logits.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = logits.softmax(-1)
    if not torch.isfinite(probs).all():
        raise FloatingPointError("logits contain NaN or inf; this request cannot be sampled")
    return int(torch.multinomial(probs, 1, generator=generator))


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]) -> list[int]:
    """Next tokens for B requests from logits (B, vocab), each with its own parameters and generator."""
    if all(p.greedy for p in params):
        return logits.argmax(-1).tolist()
    return [sample_row(row, p, g) for row, p, g in zip(logits, params, generators)]


def find_stop(text: str, params: SamplingParams, scan_from: int = 0) -> int | None:
    """Where the earliest stop string starts in text (searching from scan_from), or None."""
    hits = [i for s in params.stop if (i := text.find(s, max(0, scan_from - len(s) + 1))) != -1]
    return min(hits) if hits else None
