"""PreemptionCost's ranges: where swapping a victim out and back is cheaper than recomputing it, on
constructed prices with zero, one and two changes of choice, and on random prices against a brute-force
walk over every context length near each end."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minicb.costs import PreemptionCost
from minicb.lab.preemption_ranges import crossover_tokens, describe, ranges

INF = math.inf


@pytest.mark.parametrize("cost,spans", [
    # No change: swap is cheaper at every length (a dear fixed recompute and a steeper one), or never.
    (PreemptionCost(1e-3, 1e-4, 1e-9, 0.0, 1e-5), [(0, INF, "swap")]),
    (PreemptionCost(0.0, 1e-5, 0.0, 1e-3, 1e-4), [(0, INF, "recompute")]),
    # One change, the textbook GPU case: recompute is cheaper while short; swap's 1 ms of fixed latency is
    # paid back by its cheaper token past 100 tokens (1e-3 + 1e-5 t < 2e-5 t).
    (PreemptionCost(0.0, 2e-5, 0.0, 1e-3, 1e-5), [(0, 101, "recompute"), (101, INF, "swap")]),
    # One change the other way: swap wins while short, and recompute's cheaper per token wins from 10.
    (PreemptionCost(1e-3, 0.0, 0.0, 0.0, 1e-4), [(0, 10, "swap"), (10, INF, "recompute")]),
    # Two changes (the CPU fit): swap at first (no fixed latency), recompute from 5 tokens (a far
    # cheaper token), swap again once the square term catches up.
    (PreemptionCost(0.00048, 3.07e-06, 4.04e-09, 0.0, 0.000113), [(0, 5, "swap"), (5, 27207, "recompute"),
                                                                   (27207, INF, "swap")]),
    # A tie recomputes: equal at 0 tokens, then swap is cheaper from 1.
    (PreemptionCost(1.0, 2.0, 0.0, 1.0, 1.0), [(0, 1, "recompute"), (1, INF, "swap")]),
])
def test_ranges_on_constructed_prices(cost, spans):
    assert ranges(cost) == spans
    assert crossover_tokens(cost) == (spans[-1][0] if spans[-1][2] == "swap" else INF)


def test_the_two_crossings_in_words():
    cost = PreemptionCost(0.00048, 3.07e-06, 4.04e-09, 0.0, 0.000113)
    assert describe(cost) == "swap below 5 tokens, recompute from 5 to 27,206, swap from 27,207"
    assert describe(PreemptionCost(1e-3, 1e-4, 0.0, 0.0, 1e-5)) == "swap is cheaper at every context length"


@pytest.mark.parametrize("field,value", [("swap_fixed", -1e-3), ("recompute_per_token_sq", math.nan),
                                         ("swap_per_token", math.inf)])
def test_a_price_is_finite_and_not_negative(field, value):
    prices = dict(recompute_fixed=0.0, recompute_per_token=0.0, recompute_per_token_sq=0.0, swap_fixed=0.0,
                  swap_per_token=0.0)
    with pytest.raises(ValueError, match=f"PreemptionCost.{field} is .*finite number >= 0"):
        PreemptionCost(**{**prices, field: value})


price = st.one_of(st.just(0.0), st.floats(1e-7, 1e-2), st.integers(0, 20).map(lambda k: k * 1e-4))


@settings(max_examples=400, deadline=None)
@given(st.builds(PreemptionCost, price, price, st.one_of(st.just(0.0), st.floats(1e-12, 1e-5)), price, price))
def test_ranges_match_the_choice_at_every_length(cost):
    spans = ranges(cost)
    assert spans[0][0] == 0 and spans[-1][1] == INF, spans
    for (_, stop, choice), (first, _, following) in zip(spans, spans[1:]):
        assert stop == first and choice != following, f"ranges must meet and alternate: {spans}"
    assert len(spans) <= 3 and (len(spans) < 3 or spans[0][2] == "swap"), f"convex: swap, recompute, swap: {spans}"
    # Every length near an end, and a spread of others, against the choice itself.
    probes = {t for first, stop, _ in spans for end in (first, stop) if end != INF
              for t in range(max(0, end - 3), end + 3)} | set(range(64)) | {10 ** k for k in range(2, 13)}
    for t in sorted(probes):
        inside = next(choice for first, stop, choice in spans if first <= t < stop)
        assert (inside == "swap") == (cost.swap_s(t) < cost.recompute_s(t)), f"{t} tokens: ranges say {inside}; {spans}"
