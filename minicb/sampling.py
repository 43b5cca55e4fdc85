"""SamplingParams and the sampler: each request turns its own row of logits into its next token."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from minicb.checks import is_finite_number, is_int


# Greedy below this, as vLLM's _SAMPLING_EPS: logits / t overflows fp32 below ~1e-38, and at 1e-5 the
# softmax is already the argmax for any top-2 gap above ~1e-4, the size of fp32 noise.
GREEDY_BELOW = 1e-5


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 (or below GREEDY_BELOW) means greedy (argmax)
    top_k: int = -1                   # keep the k most likely tokens; -1 (or 0) keeps all
    top_p: float = 1.0                # keep the smallest set whose probability reaches top_p
    max_tokens: int = 256             # new tokens at most, EOS included
    stop: list[str] = field(default_factory=list)        # finish when the text contains one; it is cut off
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False          # keep going past EOS: benchmarks use it to force output lengths
    seed: int | None = None           # None: the engine derives one from its own seed and the request id

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> ValueError:
            return ValueError(f"SamplingParams.{name}={getattr(self, name)!r} is invalid: {allowed}")

        # vLLM's conventions, so code written for it runs here: None means "none", and top_k=0 means "off".
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        elif isinstance(self.stop, tuple):
            self.stop = list(self.stop)
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        elif isinstance(self.stop_token_ids, tuple):
            self.stop_token_ids = list(self.stop_token_ids)
        if is_int(self.top_k) and self.top_k == 0:
            self.top_k = -1

        if not is_finite_number(self.temperature) or self.temperature < 0:
            raise bad("temperature", "use a finite number >= 0 (0 = greedy)")
        if not is_int(self.top_k) or not (self.top_k == -1 or self.top_k >= 1):
            raise bad("top_k", "use -1 or 0 (disabled) or an integer >= 1")
        if not is_finite_number(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "use a number in (0, 1]")
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise bad("max_tokens", "use an integer >= 1")
        if not isinstance(self.stop, list) or any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", "use a string or a list of non-empty strings, such as ['\\n\\n']")
        if is_int(self.stop_token_ids):
            raise bad("stop_token_ids", f"use a list such as [{self.stop_token_ids}]")
        if not isinstance(self.stop_token_ids, list) or any(not is_int(t) or t < 0
                                                            for t in self.stop_token_ids):
            raise bad("stop_token_ids", "use a list of token ids (integers >= 0), such as [7]")
        if not isinstance(self.ignore_eos, bool):
            raise bad("ignore_eos", "use True or False")
        if self.seed is not None and (not is_int(self.seed) or not -2**63 <= self.seed < 2**63):
            raise bad("seed", "use an integer in the int64 range [-2**63, 2**63 - 1] or None")
        # As floats: an int such as 10**20 passes the checks, then overflows torch.tensor mid-step.
        self.temperature, self.top_p = float(self.temperature), float(self.top_p)
        self.stop_token_set = frozenset(self.stop_token_ids)   # a token is checked against it at every step

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A request's own random stream: its draws depend on nothing but this seed."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator]) -> list[int | None]:
    """Next token of each row of fp32 logits (B, vocab), by its own params and generator only; None for a
    row with NaN or inf (in its logits, or once scaled by its temperature), so only its request fails.
    Batched logits may differ from solo ones in the last bits, so a seeded draw can, rarely, differ too."""
    if all(p.greedy for p in params):
        return _sample(logits, params, generators)
    states = [g.get_state() for g in generators]
    try:
        return _sample(logits, params, generators)
    except Exception as err:   # noqa: BLE001: one row's parameters may break the batch's draw
        # Retry each row alone, from the same random state, so that only the row that broke it fails.
        for g, state in zip(generators, states):
            g.set_state(state)
        alone = [_sample_alone(logits[i:i + 1], p, g) for i, (p, g) in enumerate(zip(params, generators))]
        if all(token is None for token in alone):
            raise err   # not one row's doing
        return alone


def _sample_alone(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int | None:
    try:
        return _sample(logits, [params], [generator])[0]
    except Exception:   # noqa: BLE001
        return None


def _sample(logits: torch.Tensor, params: list[SamplingParams],
            generators: list[torch.Generator]) -> list[int | None]:
    tokens = logits.argmax(-1)
    # Finite where the row's largest and smallest logits are (a NaN reaches both): 20x cheaper than isfinite().all()
    sampled = logits.amax(-1).isfinite() & logits.amin(-1).isfinite()   # (B,)
    if not all(p.greedy for p in params):
        device = logits.device
        u = torch.stack([torch.rand((), generator=g, device=device) for g in generators])   # (B,)
        plain = [i for i, p in enumerate(params) if not p.greedy and p.top_k == -1 and p.top_p == 1]
        filtered = [i for i, p in enumerate(params) if not p.greedy and (p.top_k != -1 or p.top_p < 1)]
        for rows, use_filters in ((plain, False), (filtered, True)):
            if rows:
                index = torch.tensor(rows, device=device)
                picks, finite = _inverse_cdf(logits[index], [params[i] for i in rows], u[index], use_filters)
                tokens[index] = picks
                sampled[index] &= finite
    return [token if ok else None for token, ok in zip(tokens.tolist(), sampled.tolist())]


def _inverse_cdf(logits: torch.Tensor, params: list[SamplingParams], u: torch.Tensor,
                 use_filters: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, V) logits -> (R,) tokens, (R,) whether each row's distribution was finite. Only filters pay for
    the sort (the costly part) that makes top-k and top-p masks over ranks."""
    V = logits.shape[1]
    device = logits.device
    scaled = logits / torch.tensor([p.temperature for p in params], device=device)[:, None]
    order = None
    if use_filters:
        scaled, order = scaled.sort(dim=-1, descending=True)                                 # (R, V)
        top_k = torch.tensor([V if p.top_k == -1 else min(p.top_k, V) for p in params], device=device)
        scaled = scaled.masked_fill(torch.arange(V, device=device)[None, :] >= top_k[:, None], float("-inf"))
    probs = scaled.softmax(-1)
    if use_filters:
        # top-p: drop a token once the tokens before it already reach top_p; the top token always stays.
        top_p = torch.tensor([p.top_p for p in params], device=device)
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p[:, None], 0.0)
    cdf = probs.cumsum(-1)                                                                   # (R, V)
    total = cdf[:, -1]
    pick = torch.searchsorted(cdf, (u * total)[:, None]).clamp(max=V - 1)                   # (R, 1)
    return (pick if order is None else order.gather(1, pick))[:, 0], torch.isfinite(total)


def find_stop(text: str, params: SamplingParams, scan_from: int = 0) -> int | None:
    """Where the earliest stop string starts in text (searching from scan_from), or None."""
    hits = [i for s in params.stop if (i := text.find(s, max(0, scan_from - len(s) + 1))) != -1]
    return min(hits) if hits else None
