"""minicb.lab.near_tie: the gaps it reads are the model's, and compare_greedy_runs sorts each divergence by the
reference's gap where it starts."""
from __future__ import annotations

import pytest

from minicb.lab.near_tie import NEAR_TIE_BOUND, compare_greedy_runs, top2_gap, top2_gaps
from minicb.sampling import SamplingParams

PROMPT = "ROMEO.\nBut soft, what light"


@pytest.fixture(scope="module")
def greedy_run(bard_llm):
    ids = bard_llm.engine.encode(PROMPT)
    out = bard_llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    return bard_llm.engine.runner, ids, out[0].outputs[0].token_ids


def test_every_rows_gap_is_the_gap_after_that_prefix_alone(greedy_run):
    """top2_gaps reads every row of one prefill; top2_gap, the engine's own path, only the last row of each prefix."""
    runner, ids, tokens = greedy_run
    context = ids + tokens
    gaps = top2_gaps(runner, context)
    assert len(gaps) == len(context)
    for i in (len(ids) - 1, len(ids) + 4, len(context) - 1):
        assert gaps[i] == pytest.approx(top2_gap(runner, context[:i + 1]), abs=1e-4)


def test_the_same_runs_are_the_same(greedy_run):
    runner, ids, tokens = greedy_run
    result = compare_greedy_runs(runner, [ids, ids], [tokens, list(tokens)], [tokens, tokens])
    assert (result.same, result.near_ties, result.bugs, result.ok) == (2, [], [], True)
    assert result.bound == NEAR_TIE_BOUND[runner.dtype]
    assert str(result) == "2 of 2 the same, token for token"


def test_a_divergence_is_a_near_tie_only_below_the_bound(greedy_run):
    runner, ids, tokens = greedy_run
    step = 5
    other = tokens[:step] + [(tokens[step] + 1) % runner.config.vocab_size] + tokens[step + 1:]
    gap = top2_gap(runner, ids + tokens[:step])
    above = compare_greedy_runs(runner, [ids], [other], [tokens], bound=gap * 1.01)
    assert (above.same, [(r, s) for r, s, _ in above.near_ties], above.bugs) == (0, [(0, step)], [])
    below = compare_greedy_runs(runner, [ids], [other], [tokens], bound=gap * 0.99)
    assert [(r, s) for r, s, _ in below.bugs] == [(0, step)] and not below.ok
    assert "a bug (run 0 at token 5" in str(below)


def test_a_run_that_stops_early_where_both_agree_is_a_bug(greedy_run):
    runner, ids, tokens = greedy_run
    result = compare_greedy_runs(runner, [ids], [tokens[:-2]], [tokens])
    assert result.bugs == [(0, len(tokens) - 2, float("inf"))]
