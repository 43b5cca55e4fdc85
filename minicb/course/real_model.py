"""The lessons' real model, SmolLM2-135M-Instruct, where it has been fetched, and figures from one run where not.

A lesson never downloads at run time (a fresh clone's `make test` runs every lesson with no network): where
`make real-model` has not run, it says how to fetch the model and shows the figures below instead, stored from
one run on the course's reference CPU (2 cores, torch on 1 thread, fp32), each labelled as such.
"""
from __future__ import annotations

from pathlib import Path

from minicb.model.fetch import real_model_folder

REAL_MODEL = "smollm2"
NOT_FETCHED = ("SmolLM2-135M-Instruct is not fetched here: `make real-model` gets it (93 MB, about a minute), "
               "and this section then measures it. Until then it shows figures stored from one run on the "
               "course's reference CPU (2 cores, 1 thread, fp32), {when}.")

# Lesson 00: seconds per decode step (each sequence with 128 tokens cached) by sequences per step, Bard's and
# SmolLM2's in the same run (the ratios between them are what a reader compares; timings vary with load).
STORED_DECODE_STEPS_WHEN = "2026-12-03"
STORED_DECODE_STEPS: dict[str, dict[int, float]] = {
    "Bard": {1: 0.003844, 4: 0.004938, 16: 0.007726, 64: 0.02967},
    "SmolLM2-135M": {1: 0.0778, 4: 0.09974, 16: 0.1662, 64: 0.5055}}


# Lesson 09: one streamed chat reply from a fresh server on SmolLM2 (its first request), and one completion of the
# same length from the lesson's first server (Bard, served as "bard"), each as one client measured it (seconds).
STORED_CHAT_REPLY = ("Paris is a city that has captivated the imagination of people from around the world, and its "
                     "allure is undeniable. From the majestic Eiffel Tower to the opulent architecture of the Louvre "
                     "Museum, Paris is a city that is both a symbol")
STORED_CHAT_LATENCY: dict[str, dict[str, float]] = {
    "SmolLM2": {"ttft_s": 0.669, "itl_mean_s": 0.0875, "tokens": 48},
    "bard": {"ttft_s": 0.0204, "itl_mean_s": 0.00788, "tokens": 48}}


def fetched_real_model(name: str = REAL_MODEL) -> Path | None:
    """The folder of `name` where `make real-model` has fetched it, else None, having said so."""
    folder = real_model_folder(name)
    if (folder / "config.json").is_file():
        print(f"{folder.name}: fetched, in {folder}")
        return folder
    print(NOT_FETCHED.format(when=STORED_DECODE_STEPS_WHEN))
    return None
