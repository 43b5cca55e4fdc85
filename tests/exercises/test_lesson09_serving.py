"""Lesson 09's task, graded on the implementation MINICB_IMPL picks (make test: the solutions). Each check
takes the function it grades, so the negative controls at the end can show that plausible mistakes fail
the rule they break, by name."""
from __future__ import annotations

import dataclasses
import random

import pytest
from grading import obeying

from minicb import course
from minicb.client_metrics import stream_metrics as reference

mine = course.lesson("lesson09_serving")

# Worked out by hand: sent at t = 10 s; a role-only chunk, the first token at +0.30 s, one 50 ms later, an
# empty chunk (text held back), a chunk of 2 tokens 100 ms after the last token, one more, a usage-only chunk.
SEND = 10.0
STREAM = [(10.05, 0), (10.30, 1), (10.35, 1), (10.40, 0), (10.45, 2), (10.50, 1), (10.52, 0)]
WANT = dict(ttft=0.30, itl=[0.05, 0.05, 0.05, 0.05], tpot=0.05, e2e=0.50, output_tokens=5)
APPROX = dict(rel=1e-9, abs=1e-12)


def metrics_of(fn, send: float, chunks: list[tuple[float, int]]):
    return obeying("stream_metrics(send_time, chunks) returns a StreamMetrics", fn, send, chunks)


def check_ttft(fn) -> None:
    got = metrics_of(fn, 10.0, [(10.3, 1), (10.35, 1)])
    assert got.ttft == pytest.approx(0.3, **APPROX), (
        f"rule 2: ttft counts from the send time (10.0) to the first token (10.3), the queue and the network "
        f"included, not from the first chunk: got {got.ttft}")


def check_empty_chunks(fn) -> None:
    got = metrics_of(fn, SEND, STREAM)
    assert got.output_tokens == WANT["output_tokens"], (
        "rule 1: output_tokens sums the tokens the chunks carry; chunks with 0 tokens add none: "
        f"got {got.output_tokens}")
    assert got.ttft == pytest.approx(WANT["ttft"], **APPROX), (
        "rule 1: a role-only chunk at +0.05 s carries no token, so it is not the first token (ttft 0.30): "
        f"got {got.ttft}")
    assert got.e2e == pytest.approx(WANT["e2e"], **APPROX), (
        f"rule 1: the usage-only chunk at +0.52 s carries no token, so it is not the end (e2e 0.50): got {got.e2e}")
    assert got.itl == pytest.approx(WANT["itl"], **APPROX), (
        f"rule 1: an empty chunk between tokens is no gap (itl {WANT['itl']}): got {got.itl}")


def check_itl(fn) -> None:
    got = metrics_of(fn, 0.0, [(0.2, 1), (0.25, 1), (0.40, 1), (0.41, 1)])
    assert got.itl == pytest.approx([0.05, 0.15, 0.01], **APPROX), (
        f"rule 4: one ITL per token after the first, the gaps between consecutive token-carrying chunks: got {got.itl}")


def check_coalesced(fn) -> None:
    got = metrics_of(fn, 0.0, [(0.2, 1), (0.5, 3), (0.6, 1)])
    assert got.itl == pytest.approx([0.1, 0.1, 0.1, 0.1], **APPROX), (
        "rule 4: a chunk of 3 tokens arriving 0.3 s after the previous one adds 3 ITLs of 0.1 s, one per token: "
        f"got {got.itl}")
    got = metrics_of(fn, 0.0, [(0.2, 3), (0.3, 1)])
    assert got.itl == pytest.approx([0.0, 0.0, 0.1], **APPROX), (
        "rule 4: the 2 tokens that come in the first chunk along with the first token add 2 ITLs of 0 s: "
        f"got {got.itl}")
    assert got.output_tokens == 4, \
        f"rule 1: output_tokens counts every token of a coalesced chunk: got {got.output_tokens}"


def test_lesson09_task1_ttft_counts_from_the_send_time():
    check_ttft(mine.stream_metrics)


def test_lesson09_task1_chunks_without_tokens_count_for_nothing():
    check_empty_chunks(mine.stream_metrics)


def test_lesson09_task1_itl_is_the_gap_between_token_carrying_chunks():
    check_itl(mine.stream_metrics)


def test_lesson09_task1_a_coalesced_chunk_shares_its_gap_among_its_tokens():
    check_coalesced(mine.stream_metrics)


def test_lesson09_task1_e2e_ends_at_the_last_token():
    got = metrics_of(mine.stream_metrics, 1.0, [(1.5, 1), (2.0, 2), (2.5, 1)])
    assert got.e2e == pytest.approx(1.5, **APPROX), (
        f"rule 3: e2e runs from the send time (1.0) to the last token-carrying chunk (2.5): got {got.e2e}")


def test_lesson09_task1_tpot_is_the_time_per_token_after_the_first():
    got = metrics_of(mine.stream_metrics, SEND, STREAM)
    assert got.tpot == pytest.approx(WANT["tpot"], **APPROX), (
        f"rule 5: tpot = (e2e - ttft) / (output_tokens - 1) = (0.50 - 0.30) / 4: got {got.tpot}")
    got = metrics_of(mine.stream_metrics, 0.0, [(0.2, 1), (0.3, 0)])
    assert got.tpot is None and got.itl == [], (
        f"rule 5: a single output token has no time per token after it: tpot None, no ITLs (got {got.tpot}, {got.itl})")
    assert got.ttft == pytest.approx(0.2, **APPROX) and got.e2e == pytest.approx(0.2, **APPROX), (
        "rules 2 and 3: a single token is both the first and the last")


@pytest.mark.parametrize("chunks", [[], [(0.1, 0), (0.2, 0)]], ids=["no chunk", "only empty chunks"])
def test_lesson09_task1_a_stream_without_tokens_has_no_latencies(chunks):
    got = metrics_of(mine.stream_metrics, 0.0, chunks)
    assert (got.ttft, got.itl, got.tpot, got.e2e, got.output_tokens) == (None, [], None, None, 0), (
        f"rule 6: a stream without a token (rejected or failed) has ttft, tpot and e2e None, no ITLs, 0 tokens: {got}")


@pytest.mark.parametrize("send,chunks", [(1.0, [(0.5, 1), (1.5, 1)]), (0.0, [(0.2, 1), (0.4, 1), (0.3, 1)])],
                         ids=["chunk before the send", "chunks out of order"])
def test_lesson09_task1_times_that_go_backwards_are_an_error_naming_the_fix(send, chunks):
    with pytest.raises(ValueError, match="perf_counter") as caught:
        mine.stream_metrics(send, chunks)
    assert "monotonic" in str(caught.value), "rule 7: the message says to use one monotonic clock"


def per_token_itls(send: float, chunks: list[tuple[float, int]]) -> tuple[list[float], float | None]:
    """The rules restated as each token's own arrival time: the first chunk's tokens all at its time, a later
    chunk's k tokens evenly over the gap since the previous token; ITLs are the differences, TPOT their mean."""
    stamps: list[float] = []
    for t, k in chunks:
        if k:
            start = stamps[-1] if stamps else t
            stamps += [start + (t - start) * (j + 1) / k for j in range(k)]
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    return itl, (sum(itl) / len(itl) if itl else None)


def test_lesson09_task1_agrees_with_per_token_stamps_on_random_streams():
    rng = random.Random(9)
    for case in range(200):
        send = rng.uniform(0, 100)
        t, chunks = send, []
        for _ in range(rng.randint(0, 12)):
            t += rng.choice([0.0, rng.expovariate(20)])
            chunks.append((t, rng.choice([0, 1, 1, 1, 2, 4])))
        got = metrics_of(mine.stream_metrics, send, chunks)
        itl, tpot = per_token_itls(send, chunks)
        token_times = [t for t, k in chunks if k]
        where = f"(random stream {case}: sent at {send}, chunks {chunks})"
        assert got.output_tokens == sum(k for _, k in chunks), f"rule 1: output_tokens {where}"
        assert got.ttft == (pytest.approx(token_times[0] - send, **APPROX) if token_times else None), f"rule 2 {where}"
        assert got.e2e == (pytest.approx(token_times[-1] - send, **APPROX) if token_times else None), f"rule 3 {where}"
        assert got.itl == pytest.approx(itl, **APPROX), f"rule 4 {where}"
        assert got.tpot == (None if tpot is None else pytest.approx(tpot, rel=1e-9, abs=1e-9)), f"rule 5 {where}"


# --- negative controls: plausible mistakes, each failing the rule it breaks ------------------------------

def ttft_from_the_first_chunk(send_time, chunks):
    """Forgets the queue and the network: the clock starts at the first chunk."""
    return reference(chunks[0][0] if chunks else send_time, chunks)


def counts_empty_chunks(send_time, chunks):
    """Takes every chunk for a token, the role-only and usage-only ones included."""
    return reference(send_time, [(t, max(k, 1)) for t, k in chunks])


def one_itl_per_chunk(send_time, chunks):
    """Ignores coalescing: one ITL per chunk (the whole gap), however many tokens it carries."""
    times = [t for t, k in chunks if k]
    return dataclasses.replace(reference(send_time, chunks), itl=[b - a for a, b in zip(times, times[1:])])


@pytest.mark.parametrize("wrong,check,rule", [
    (ttft_from_the_first_chunk, check_ttft, "rule 2: ttft counts from the send time"),
    (counts_empty_chunks, check_empty_chunks, "rule 1: output_tokens sums the tokens"),
    (one_itl_per_chunk, check_coalesced, "rule 4: a chunk of 3 tokens"),
], ids=["ttft from the first chunk", "empty chunks counted", "coalesced chunks ignored"])
def test_grading_catches_a_plausible_mistake(wrong, check, rule):
    """A negative control: the reference passes every check, the mistake fails its rule by name."""
    for passing in (check_ttft, check_empty_chunks, check_itl, check_coalesced):
        passing(reference)
    with pytest.raises(AssertionError, match=rule):
        check(wrong)
