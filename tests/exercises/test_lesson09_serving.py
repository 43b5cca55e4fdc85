"""Lesson 09's task, graded on the implementation MINICB_IMPL picks (make test: the solutions).

Each check is a function of the stream_metrics it grades, so that tests/graders/test_lesson09_controls.py can
show plausible mistakes failing the rule they break, by name:
- worked streams, one per situation a client meets, with minicb's own answers (vectors/lesson09_stream_metrics.json,
  written by tools/lesson09_vectors.py);
- the contract on random streams (hypothesis), a failure naming the rule and the smallest stream that breaks it;
- minicb's own answer (minicb.serve.stream_metrics.stream_metrics) on the same random streams.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from grading import obeying
from hypothesis import given, settings
from hypothesis import strategies as st

from minicb import course
from minicb.serve.client_metrics import StreamMetrics
from minicb.serve.stream_metrics import stream_metrics as minicb_stream_metrics

mine = course.lesson("lesson09_serving")

VECTORS = json.loads((Path(__file__).parent / "vectors" / "lesson09_stream_metrics.json").read_text())["cases"]
CLOSE = dict(rel=1e-9, abs=1e-9)
RANDOM_STREAMS = settings(max_examples=150, deadline=None, report_multiple_bugs=False)

# The contract's rules, in words (the stub's docstring): every failure message starts with one.
TOKENS = "output_tokens counts the tokens the stream delivered, none for a chunk without a token"
TTFT = "ttft runs from the send to the first token's arrival, and a chunk without a token is no token"
E2E = "e2e runs from the send to the last token's arrival, and a chunk without a token is no token"
ITL = "itl holds one entry per token after the first, none negative"
ITL_SHARED = ("the tokens of one chunk share the wait since the previous token evenly, and those that came with "
              "the first token waited 0")
TPOT = "tpot is the mean time per token after the first, None when there is none"
NO_TOKEN = "a stream without a token has ttft, tpot and e2e None, no ITLs and 0 tokens"
EMPTY_CHUNK = "a chunk without a token is no token's arrival: never the first token, the last one, or a gap between two"
CLOCK = ("a time before the send or before the previous chunk's raises ValueError, whose message says to stamp the "
         "send and every chunk with one monotonic clock (time.perf_counter())")

Chunks = list[tuple[float, int]]


def described(send_time: float, chunks: Chunks) -> str:
    """A stream in words, its times counted from the send."""
    if not chunks:
        return f"the stream sent at {send_time:g} s with no chunk"
    return f"the stream sent at {send_time:g} s with chunks at " + ", ".join(
        f"{round(t - send_time, 9):+g} s ({'no token' if k == 0 else f'{k} token' + 's' * (k > 1)})" for t, k in chunks)


def metrics_of(fn, send_time: float, chunks: Chunks) -> StreamMetrics:
    # An error on a stream is named by what the stream has that a first try forgets (a division by a chunk's
    # 0 tokens, the first token of a stream with none), not as a raw ZeroDivisionError.
    if not any(k for _, k in chunks):
        rule = NO_TOKEN
    elif any(k == 0 for _, k in chunks):
        rule = EMPTY_CHUNK
    else:
        rule = "stream_metrics(send_time, chunks) returns a StreamMetrics"
    got = obeying(f"{rule}: for {described(send_time, chunks)}", fn, send_time, list(chunks))
    assert isinstance(got, StreamMetrics), f"stream_metrics returns a StreamMetrics, not {type(got).__name__}: {got!r}"
    return got


def check_answer(got: StreamMetrics, want: dict, where: str) -> None:
    """got against the answer minicb gives (want, StreamMetrics' fields), field by field, in an order where the
    first one that differs names the rule broken."""
    if want["output_tokens"] == 0:
        assert (got.ttft, got.itl, got.tpot, got.e2e, got.output_tokens) == (None, [], None, None, 0), (
            f"{NO_TOKEN}: got {got} for {where}")
        return
    assert got.output_tokens == want["output_tokens"], (
        f"{TOKENS}: got {got.output_tokens}, not {want['output_tokens']}, for {where}")
    assert got.ttft == pytest.approx(want["ttft"], **CLOSE), f"{TTFT}: got {got.ttft}, not {want['ttft']}, for {where}"
    assert got.e2e == pytest.approx(want["e2e"], **CLOSE), f"{E2E}: got {got.e2e}, not {want['e2e']}, for {where}"
    assert len(got.itl) == len(want["itl"]), (
        f"{ITL}: got {len(got.itl)} ITLs, not {len(want['itl'])}, for {where} (your itl: {got.itl})")
    assert got.itl == pytest.approx(want["itl"], **CLOSE), (
        f"{ITL_SHARED}: got itl {got.itl}, not {want['itl']}, for {where}")
    assert got.tpot == (None if want["tpot"] is None else pytest.approx(want["tpot"], **CLOSE)), (
        f"{TPOT}: got {got.tpot}, not {want['tpot']}, for {where}")


def check_refused(fn, send_time: float, chunks: Chunks) -> None:
    where = described(send_time, chunks)
    try:
        got = fn(send_time, list(chunks))
    except ValueError as error:
        assert "monotonic" in str(error) and "perf_counter" in str(error), (
            f"{CLOCK}: the ValueError for {where} says {str(error)!r}")
        return
    except NotImplementedError:
        raise
    except Exception as error:   # noqa: BLE001 - any other error is the learner's to see, with the rule
        pytest.fail(f"{CLOCK}: {where} raised {type(error).__name__}: {error}")
    pytest.fail(f"{CLOCK}: {where} returned {got}")


def check_vector(fn, case: dict) -> None:
    chunks = [tuple(c) for c in case["chunks"]]
    if "want_error" in case:
        check_refused(fn, case["send_time"], chunks)
    else:
        check_answer(metrics_of(fn, case["send_time"], chunks), case["want"],
                     f"{described(case['send_time'], chunks)} ({case['what']})")


def check_vectors(fn) -> None:
    for case in VECTORS:
        check_vector(fn, case)


def check_contract_on(fn, send_time: float, chunks: Chunks) -> None:
    """The docstring's contract on one stream, from the stream itself (no answer to compare with)."""
    got = metrics_of(fn, send_time, chunks)
    where = described(send_time, chunks)
    tokens = [(t, k) for t, k in chunks if k > 0]
    n = sum(k for _, k in tokens)
    assert got.output_tokens == n, f"{TOKENS}: got {got.output_tokens}, not {n}, for {where}"
    if n == 0:
        assert (got.ttft, got.itl, got.tpot, got.e2e) == (None, [], None, None), f"{NO_TOKEN}: got {got} for {where}"
        return
    first, last = tokens[0][0], tokens[-1][0]
    assert got.ttft == pytest.approx(first - send_time, **CLOSE), f"{TTFT}: got {got.ttft} for {where}"
    assert got.e2e == pytest.approx(last - send_time, **CLOSE), f"{E2E}: got {got.e2e} for {where}"
    assert len(got.itl) == n - 1 and all(x >= -1e-12 for x in got.itl), (
        f"{ITL}: got {len(got.itl)} ITLs for {n} tokens, {got.itl}, for {where}")
    with_the_first = tokens[0][1] - 1
    assert got.itl[:with_the_first] == pytest.approx([0.0] * with_the_first, **CLOSE), (
        f"{ITL_SHARED}: the {with_the_first} tokens that came with the first token got ITLs "
        f"{got.itl[:with_the_first]}, for {where}")
    seen = with_the_first
    for t, k in tokens[1:]:
        shares, seen = got.itl[seen:seen + k], seen + k
        assert shares == pytest.approx([shares[0]] * k, **CLOSE), (
            f"{ITL_SHARED}: the {k} tokens of the chunk at {round(t - send_time, 9):+g} s got unequal ITLs "
            f"{shares}, for {where}")
        assert sum(got.itl[:seen]) == pytest.approx(t - first, **CLOSE), (
            f"{ITL_SHARED}: the ITLs up to the chunk at {round(t - send_time, 9):+g} s add up to "
            f"{sum(got.itl[:seen]):g} s, not the {t - first:g} s since the first token, for {where}")
    want_tpot = None if n == 1 else pytest.approx((last - first) / (n - 1), **CLOSE)
    assert got.tpot == want_tpot, f"{TPOT}: got {got.tpot} for {n} tokens, for {where}"


@st.composite
def streams(draw) -> tuple[float, Chunks]:
    """A send time and chunks after it, whole milliseconds (so that the message's times read exactly),
    shrinking towards few chunks, no gaps and no tokens."""
    send_ms = draw(st.integers(0, 100_000))
    steps = draw(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 4)), max_size=10))
    chunks, t_ms = [], send_ms
    for gap_ms, tokens in steps:
        t_ms += gap_ms
        chunks.append((t_ms / 1000, tokens))
    return send_ms / 1000, chunks


@st.composite
def backwards_streams(draw) -> tuple[float, Chunks]:
    """A stream with one chunk stamped before the send (the first chunk) or before the previous chunk."""
    send_time, chunks = draw(streams().filter(lambda s: s[1]))
    i = draw(st.integers(0, len(chunks) - 1))
    before = chunks[i - 1][0] if i else send_time
    chunks[i] = (before - draw(st.integers(1, 300)) / 1000, chunks[i][1])
    return send_time, chunks


def check_contract(fn) -> None:
    @RANDOM_STREAMS
    @given(streams())
    def holds(stream):
        check_contract_on(fn, *stream)
    holds()


def check_backwards_times(fn) -> None:
    @RANDOM_STREAMS
    @given(backwards_streams())
    def refused(stream):
        check_refused(fn, *stream)
    refused()


def check_agrees_with_minicb(fn) -> None:
    @RANDOM_STREAMS
    @given(streams())
    def agrees(stream):
        want = dataclasses.asdict(minicb_stream_metrics(*stream))
        check_answer(metrics_of(fn, *stream), want, described(*stream))
    agrees()


@pytest.mark.parametrize("case", VECTORS, ids=[case["what"] for case in VECTORS])
def test_lesson09_task1_worked_streams(case):
    check_vector(mine.stream_metrics, case)


def test_lesson09_task1_meets_the_contract_on_random_streams():
    check_contract(mine.stream_metrics)


def test_lesson09_task1_refuses_times_that_go_backwards_naming_the_fix():
    check_backwards_times(mine.stream_metrics)


def test_lesson09_task1_agrees_with_minicb_on_random_streams():
    check_agrees_with_minicb(mine.stream_metrics)
