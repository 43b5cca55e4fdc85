"""Where swap or recompute is cheaper after a preemption, by context length (lesson 06b).
recompute - swap is convex in the context, so swap wins on at most two ranges: one from 0, one without end."""
from __future__ import annotations

import math

from minicb.costs import PreemptionCost


def ranges(cost: PreemptionCost) -> list[tuple[int, float, str]]:
    """(first, stop, "swap" or "recompute") ranges covering every context length from 0, in order; stop is
    exclusive, inf for the last. cost.swap_s(t) < cost.recompute_s(t) exactly when t is in a "swap" range."""
    # By convexity recompute - swap falls until `turn` and rises from it, so swap wins on [0, first_loss)
    # and again from first_win on.
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
    """The context from which swapping stays cheaper: 0 if always, inf if never. Ignores a swap range at
    the start; ranges() gives all."""
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
    """The first t in [lo, hi) where `holds` is true, given it stays true from there on; None if none.
    hi None: unbounded, searched up to 2^62."""
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
