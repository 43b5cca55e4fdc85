"""SamplingParams validation, the sampler's filters, stop conditions, and batch-independence of sampling."""
from __future__ import annotations

import pytest
import torch

from conftest import NEAR_TIE_GAP, RELIABILITY_COUNTS
from minicb.runner.batch import SequenceChunk
from minicb.runner.batch_builder import build_flat_batch
from minicb.sampling import GREEDY_BELOW, SamplingParams, find_stop, make_generator, sample


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.1), ("temperature", float("nan")), ("temperature", float("inf")),
    ("top_k", -2), ("top_k", 2.5), ("top_k", True),
    ("top_p", 0.0), ("top_p", 1.5),
    ("max_tokens", 0), ("max_tokens", -3),
    ("stop", [""]), ("stop_token_ids", [-1]), ("seed", "abc"),
    pytest.param("temperature", 10**401, id="temperature-401-digits"),
    pytest.param("top_p", -10**401, id="top_p-401-digits"),
])
def test_bad_sampling_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}=.*invalid: use"):
        SamplingParams(**{field: value})


def test_a_single_stop_string_is_accepted():
    assert SamplingParams(stop="\n\n").stop == ["\n\n"]


def draw(logits, params, n=4000):
    """n draws for one row, made as one batch of n rows with n independent generators."""
    gens = [torch.Generator().manual_seed(i) for i in range(n)]
    return torch.tensor(sample(logits.expand(n, -1).contiguous(), [params] * n, gens))


def test_sampling_follows_the_softmax_distribution():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    counts = torch.bincount(draw(logits, SamplingParams(temperature=1.0)), minlength=4) / 4000
    torch.testing.assert_close(counts, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03, rtol=0)


def test_top_k_and_top_p_restrict_the_support():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert set(draw(logits, SamplingParams(top_k=2)).tolist()) == {0, 1}
    # top_p=0.6: token 0 alone has 0.5 < 0.6, so token 1 is needed too; token 2 is not.
    assert set(draw(logits, SamplingParams(top_p=0.6)).tolist()) == {0, 1}
    assert set(draw(logits, SamplingParams(top_p=0.01)).tolist()) == {0}


def test_low_temperature_approaches_greedy():
    logits = torch.tensor([1.0, 3.0, 2.0])
    assert set(draw(logits, SamplingParams(temperature=1e-3), n=200).tolist()) == {1}


@pytest.mark.parametrize("temperature", [1e-6, 1e-37, 1e-40, 5e-324])
def test_a_temperature_below_greedy_below_is_greedy_and_leaves_its_batch_alone(temperature):
    """Dividing by 1e-40 overflows fp32 logits to inf, and the softmax to NaN; such a temperature is greedy
    instead, and its companions draw what they draw without it."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 5
    tiny, plain = SamplingParams(temperature=temperature), SamplingParams(temperature=1.0)
    assert tiny.greedy and not SamplingParams(temperature=GREEDY_BELOW).greedy
    together = sample(logits, [plain, tiny, plain], [torch.Generator().manual_seed(s) for s in (1, 2, 3)])
    assert together[1] == int(logits[1].argmax())
    alone = [sample(logits[[i]], [plain], [torch.Generator().manual_seed(s)])[0] for i, s in ((0, 1), (2, 3))]
    assert [together[0], together[2]] == alone


def test_a_row_that_cannot_be_sampled_gets_none_and_the_others_their_own_draws():
    """NaN logits, finite logits that overflow once divided by the temperature, and parameters that break
    the batch's draw (an int too large for a tensor, as 10**20 was before SamplingParams made it a float):
    None for that row alone (the engine fails its request), and every other row draws exactly what it
    draws alone."""
    assert SamplingParams(temperature=10**20).temperature == 1e20
    good = torch.tensor([0.0, 1.0, 0.5, -1.0])
    rows = torch.stack([good, torch.tensor([float("nan"), 1.0, 0.0, 0.0]), good,
                        torch.tensor([3e38, 0.0, 0.0, 0.0]), good, good])
    breaks_the_batch = SamplingParams()
    breaks_the_batch.temperature = 10**400
    params = [SamplingParams(), SamplingParams(), SamplingParams(temperature=0),
              SamplingParams(temperature=0.5), SamplingParams(top_k=3, seed=4), breaks_the_batch]
    got = sample(rows, params, [torch.Generator().manual_seed(i) for i in range(6)])
    assert got[1] is None and got[3] is None and got[5] is None
    for i in (0, 2, 4):
        assert got[i] == sample(good[None], [params[i]], [torch.Generator().manual_seed(i)])[0]


def test_the_same_row_and_generator_draw_the_same_tokens_whatever_else_is_in_the_batch():
    """A request's draws are a function of its own row of logits and its own generator: 40 steps alone
    against the same 40 steps at a changing position among changing companions (greedy, plain, filtered,
    hot, cold, a NaN row), for plain and filtered sampling."""
    rng = torch.Generator().manual_seed(0)
    V = 500
    kinds = [SamplingParams(temperature=0), SamplingParams(temperature=0.7), SamplingParams(top_k=20),
             SamplingParams(temperature=1.3, top_p=0.9), SamplingParams(top_k=5, top_p=0.5)]
    for mine in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=50, top_p=0.95)):
        solo_gen, batched_gen = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
        for step in range(40):
            row = torch.randn(V, generator=rng) * 3
            solo = sample(row[None].clone(), [mine], [solo_gen])[0]
            size = 1 + step % 9
            where = int(torch.randint(size, (), generator=rng))
            batch = torch.randn(size, V, generator=rng) * 3
            batch[where] = row
            if size > 2:
                batch[(where + 1) % size, 0] = float("nan")
            params = [kinds[int(torch.randint(len(kinds), (), generator=rng))] for _ in range(size)]
            params[where] = mine
            gens = [torch.Generator().manual_seed(100 * step + i) for i in range(size)]
            gens[where] = batched_gen
            assert sample(batch, params, gens)[where] == solo, f"step {step}, position {where} of {size}"


def test_greedy_and_sampled_rows_mix_in_one_batch():
    logits = torch.tensor([[0.0, 5.0, 1.0]] * 3)
    params = [SamplingParams(temperature=0), SamplingParams(top_k=1), SamplingParams(temperature=0.5, top_p=0.01)]
    assert sample(logits, params, [torch.Generator().manual_seed(i) for i in range(3)]) == [1, 1, 1]


def test_find_stop_finds_the_earliest_string_and_scans_only_new_text():
    p = SamplingParams(stop=["lord", "!"])
    assert find_stop("my good lord! yes", p) == 8
    assert find_stop("my good lord", p, scan_from=10) == 8   # "lord" straddles the old/new boundary
    assert find_stop("ab", p) is None


# --- on the Bard model -------------------------------------------------------------------------

SPEAKERS = ["ROMEO.\n", "JULIET.\n", "MERCUTIO.\n", "NURSE.\n", "HAMLET.\n", "IAGO.\n"]


def one(llm, prompt, **params):
    return llm.generate([prompt], SamplingParams(**params), use_tqdm=False)[0].outputs[0]


# Two correct fp32 runs of one row differ by ~1e-6 in its logits; a perturbation of d moves each point of
# the cumulative distribution by at most 2d. A batched draw may pick another token than the solo one only
# where the solo draw lies that close to the boundary between the two.
NEAR_BOUNDARY = 2 * NEAR_TIE_GAP


def distance_to_token(logits: torch.Tensor, params: SamplingParams, u: float, token: int) -> float:
    """How far the draw u * total lies from `token`'s interval of the cumulative distribution the sampler
    builds for this row (vocabulary order; sorted by logit, then top-k and top-p, with filters)."""
    scaled, order = logits / params.temperature, torch.arange(logits.numel())
    filtered = params.top_k != -1 or params.top_p < 1
    if filtered:
        scaled, order = scaled.sort(descending=True)
        if params.top_k != -1:
            scaled[params.top_k:] = float("-inf")
    probs = scaled.softmax(-1)
    if filtered:
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= params.top_p, 0.0)
    cdf = probs.cumsum(-1).tolist()
    rank = int((order == token).nonzero())
    low, high, x = (cdf[rank - 1] if rank else 0.0), cdf[rank], u * cdf[-1]
    return max(low - x, x - high, 0.0)


@pytest.mark.parametrize("params", [dict(temperature=1.0), dict(temperature=0.8, top_k=50, top_p=0.95)],
                         ids=["plain", "filtered"])
def test_seeded_tokens_alone_and_in_a_batch_differ_only_at_a_draw_on_a_boundary(bard_llm, params):
    """32 seeded requests together against each alone. Where a pair parts, the solo run's draw at that token
    (replayed from its seed) must lie within NEAR_BOUNDARY of both tokens' intervals, in logits computed
    alone: the batch moved the boundary, nothing else. Such cases are counted, never excused."""
    prompts = [SPEAKERS[i % len(SPEAKERS)] for i in range(32)]
    seeded = [SamplingParams(**params, max_tokens=48, ignore_eos=True, seed=100 + i) for i in range(32)]
    together = bard_llm.generate(prompts, seeded, use_tqdm=False)
    runner, encode = bard_llm.engine.runner, bard_llm.engine.encode
    on_a_boundary = 0
    for prompt, p, out in zip(prompts, seeded, together):
        alone = bard_llm.generate([prompt], p, use_tqdm=False)[0].outputs[0].token_ids
        got = out.outputs[0].token_ids
        if got == alone:
            continue
        step = next(k for k, (a, b) in enumerate(zip(got, alone)) if a != b)
        generator = make_generator(p.seed)
        u = [float(torch.rand((), generator=generator)) for _ in range(step + 1)][step]
        ids = encode(prompt) + alone[:step]
        logits = runner.logits(build_flat_batch([SequenceChunk(ids, 0, list(range(-(-len(ids) // 16))))], 16))[0]
        for token in (alone[step], got[step]):
            distance = distance_to_token(logits, p, u, token)
            assert distance < NEAR_BOUNDARY, (f"seed {p.seed}: token {step} is {got[step]} in the batch, "
                                              f"{alone[step]} alone, and the draw lies {distance:.2e} from "
                                              f"{token}'s interval: not a boundary the batch moved")
        on_a_boundary += 1
    RELIABILITY_COUNTS["near_ties"] += on_a_boundary
    assert on_a_boundary <= 3, f"{on_a_boundary} of 32 parted at a boundary: far more than fp32 noise explains"


def test_seeds_make_sampling_repeatable(bard_llm):
    run = lambda seed: one(bard_llm, "ROMEO.\n", temperature=1.0, max_tokens=32, seed=seed,  # noqa: E731
                           ignore_eos=True).token_ids
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_stop_conditions(bard_llm):
    eos = bard_llm.engine.runner.config.eos_token_ids[0]
    full = one(bard_llm, "HAMLET.\n", temperature=0, max_tokens=200, ignore_eos=True)
    assert full.finish_reason == "length" and len(full.token_ids) == 200

    natural = one(bard_llm, "HAMLET.\n", temperature=0, max_tokens=200)
    assert natural.finish_reason == "stop" and natural.token_ids[-1] == eos
    assert eos not in natural.token_ids[:-1]

    word = full.text.split()[3]
    cut = one(bard_llm, "HAMLET.\n", temperature=0, max_tokens=200, stop=[word])
    assert cut.finish_reason == "stop" and cut.text == full.text[:full.text.index(word)]

    stop_id = full.token_ids[5]
    by_id = one(bard_llm, "HAMLET.\n", temperature=0, max_tokens=200, stop_token_ids=[stop_id], ignore_eos=True)
    first = full.token_ids.index(stop_id)
    assert by_id.token_ids == full.token_ids[:first + 1] and by_id.finish_reason == "stop"


def test_incremental_text_equals_a_full_decode(bard_llm):
    """Text grows token by token through incremental detokenisation; it must end equal to
    decoding the whole output at once, also for hot (odd-byte) samples."""
    tok = bard_llm.engine.tokenizer
    params = [SamplingParams(temperature=t, max_tokens=80, seed=s, ignore_eos=True) for t in (0.8, 1.5, 3.0)
              for s in range(3)]
    streamed = {i: "" for i in range(len(params))}
    for index, new, output in bard_llm.stream(["KING.\n"] * len(params), params):
        streamed[index] += new
        if output.finished:
            assert output.outputs[0].text == tok.decode(output.outputs[0].token_ids, skip_special_tokens=True)
            assert streamed[index] == output.outputs[0].text
