"""Where each way back from a preemption is cheaper, by context length (lesson 06b): a PreemptionCost's prices
(minicb/costs.py) compared at every length. recompute - swap is convex in the context, so swap is cheaper on
at most two ranges, one from 0 tokens and one that never ends, with recompute cheaper between them."""
from __future__ import annotations

import math

from minicb.costs import PreemptionCost


def ranges(cost: PreemptionCost) -> list[tuple[int, float, str]]:
    """Where each choice is cheaper: (first, stop, "swap" or "recompute") over every context length from 0
    tokens, in order, each range ending where the next begins (stop exclusive; inf for the last). The ends are
    exact: cost.swap_s(t) < cost.recompute_s(t) holds for t in a "swap" range and for no other t."""
    # Over whole tokens the gap recompute - swap falls until `turn` and rises from it (convexity), so
    # swap wins on [0, first_loss) and again from first_win on, with recompute between them.
    if cost.recompute_per_token_sq > 0:
        lowest = (cost.swap_per_token - cost.recompute_per_token) / (2 * cost.recompute_per_token_sq)
        turn = max(0, math.floor(min(lowest, 2.0 ** 62)) + 1)
    else:
        turn = 0 if cost.recompute_per_token >= cost.swap_per_token else None   # None: it falls for ever
    def cheaper(tokens: int) -> bool:
        return cost.swap_s(tokens) < cost.recompute_s(tokens)

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

def crossover_tokens(cost: PreemptionCost) -> float:
    """The context from which swapping is cheaper for good: 0 if always, inf if never. It says
    nothing of a short range at the start where swap may also win: ranges() gives them all."""
    first, _, choice = ranges(cost)[-1]
    return float(first) if choice == "swap" else math.inf

def describe(cost: PreemptionCost) -> str:
    """The ranges in words, e.g. "swap below 5 tokens, recompute from 5 to 27,999, swap from 28,000"."""
    spans = ranges(cost)
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
