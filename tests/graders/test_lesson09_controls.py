"""Lesson 09's negative controls: plausible mistakes in stream_metrics, each written as a learner would make it
(minicb's own, with one thing broken), and the rule of tests/exercises/test_lesson09_serving.py each must fail."""
from __future__ import annotations

import dataclasses
import re

import pytest
import test_lesson09_serving as grader

from minicb.serve.stream_metrics import stream_metrics as reference

CHECKS = {"vectors": grader.check_vectors, "contract": grader.check_contract,
          "minicb": grader.check_agrees_with_minicb, "backwards": grader.check_backwards_times}


def ttft_from_the_first_chunk(send_time, chunks):
    """Forgets the queue and the network: the clock starts at the first chunk, a role-only one included."""
    return reference(chunks[0][0] if chunks else send_time, chunks)


def counts_empty_chunks(send_time, chunks):
    """Takes every chunk for a token, the role-only and usage-only ones included."""
    return reference(send_time, [(t, max(k, 1)) for t, k in chunks])


def e2e_to_the_streams_end(send_time, chunks):
    """Ends the request at its last chunk, the usage-only one after the last token included."""
    got = reference(send_time, chunks)
    return dataclasses.replace(got, e2e=chunks[-1][0] - send_time) if got.output_tokens else got


def itl_counts_the_wait_for_the_first_token(send_time, chunks):
    """Takes the first token's wait (from the send) for an ITL too."""
    got = reference(send_time, chunks)
    return dataclasses.replace(got, itl=[got.ttft, *got.itl]) if got.output_tokens else got


def one_itl_per_chunk(send_time, chunks):
    """Ignores coalescing: one ITL per chunk, the whole gap, however many tokens the chunk carries."""
    got = reference(send_time, chunks)
    times = [t for t, k in chunks if k]
    return dataclasses.replace(got, itl=[b - a for a, b in zip(times, times[1:])])


def forgets_the_tokens_that_came_with_the_first(send_time, chunks):
    """Starts the ITLs at the second chunk: the first chunk's other tokens get none."""
    got = reference(send_time, chunks)
    first_k = next((k for _, k in chunks if k), 1)
    return dataclasses.replace(got, itl=got.itl[first_k - 1:])


def a_chunks_wait_goes_to_its_first_token(send_time, chunks):
    """Gives a coalesced chunk's whole gap to its first token, 0 to the others (the count and sum still right)."""
    return reference(send_time, [(t, 1) for t, k in chunks for _ in range(k)])


def tpot_per_chunk(send_time, chunks):
    """Averages over the chunks after the first instead of the tokens after the first."""
    got = reference(send_time, chunks)
    times = [t for t, k in chunks if k]
    return dataclasses.replace(got, tpot=(times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None)


def shares_every_chunks_gap(send_time, chunks):
    """Shares the wait before each chunk among the tokens it carries, the token-less chunks too."""
    got = reference(send_time, chunks)
    gaps = [[(t - previous) / k] * k for (previous, _), (t, k) in zip(chunks, chunks[1:])]
    return dataclasses.replace(got, itl=[itl for gap in gaps for itl in gap])


def reads_the_first_chunk_first(send_time, chunks):
    """Unpacks the first chunk before asking whether any came: a stream of no chunk at all raises IndexError."""
    first_time, _ = chunks[0]
    return reference(send_time, chunks)


def sorts_the_times_instead_of_refusing(send_time, chunks):
    """Repairs a stream stamped on two clocks (sorted, none before the send) instead of refusing it."""
    return reference(send_time, sorted((max(t, send_time), k) for t, k in chunks))


def refuses_without_naming_the_fix(send_time, chunks):
    """Refuses times that go backwards, but without saying how to stamp them."""
    try:
        return reference(send_time, chunks)
    except ValueError:
        raise ValueError("chunk times go backwards") from None


CONTROLS = [
    (ttft_from_the_first_chunk, "vectors", grader.TTFT),
    (ttft_from_the_first_chunk, "contract", grader.TTFT),
    (counts_empty_chunks, "vectors", grader.TOKENS),
    (counts_empty_chunks, "contract", grader.TOKENS),
    (e2e_to_the_streams_end, "vectors", grader.E2E),
    (e2e_to_the_streams_end, "contract", grader.E2E),
    (itl_counts_the_wait_for_the_first_token, "contract", grader.ITL),
    (itl_counts_the_wait_for_the_first_token, "minicb", grader.ITL),
    (one_itl_per_chunk, "vectors", grader.ITL),
    (one_itl_per_chunk, "contract", grader.ITL),
    (forgets_the_tokens_that_came_with_the_first, "vectors", grader.ITL),
    (forgets_the_tokens_that_came_with_the_first, "contract", grader.ITL),
    (a_chunks_wait_goes_to_its_first_token, "vectors", grader.ITL_SHARED),
    (a_chunks_wait_goes_to_its_first_token, "contract", grader.ITL_SHARED),
    (tpot_per_chunk, "vectors", grader.TPOT),
    (tpot_per_chunk, "minicb", grader.TPOT),
    (shares_every_chunks_gap, "vectors", grader.EMPTY_CHUNK),
    (reads_the_first_chunk_first, "vectors", grader.NO_TOKEN),
    (reads_the_first_chunk_first, "contract", grader.NO_TOKEN),
    (sorts_the_times_instead_of_refusing, "vectors", grader.CLOCK),
    (sorts_the_times_instead_of_refusing, "backwards", grader.CLOCK),
    (refuses_without_naming_the_fix, "backwards", grader.CLOCK),
]


@pytest.mark.parametrize("check", CHECKS)
def test_minicbs_own_stream_metrics_passes_every_check(check):
    CHECKS[check](reference)


@pytest.mark.parametrize("wrong,check,rule", CONTROLS, ids=[f"{w.__name__}-{c}" for w, c, _ in CONTROLS])
def test_a_plausible_mistake_fails_the_rule_it_breaks(wrong, check, rule):
    with pytest.raises((AssertionError, pytest.fail.Exception), match="^" + re.escape(rule)):
        CHECKS[check](wrong)
