"""The workloads each design task is graded on: drawn as its practice workloads are, from seeds that no
lesson, stub, practice set or failure message shows.

A design answer is judged where its author could not tune it, so that one fitted to a workload's accidents
fails. The graders name a held-out workload by its place ("held-out workload 3 of 5") and say what
happened there, never by its seed. The seeds are in this file because the tests must run them: reading
them is reading the answer key, and tuning on them passes the check without doing the task.
"""
from __future__ import annotations

# Lesson 04 task 2: the pool sizing problem's workloads (minicb.course.pool_sizing).
PASSING_OVER = (101, 102, 103)   # lesson 02: bursts where passing someone over may delay them
POOL_SIZING = (101, 102, 103, 104, 105)

# Lesson 06 task 2: the victim policy's bursts (minicb.course.victims).
VICTIM_POLICY = tuple(range(101, 109))   # eight: the slowest few of 200 requests move a lot from one burst to the next

# Lesson 07 task 2: slo_workload's draws. Not every seed's can be served within the SLO at 48 requests per
# second: some (3, 110, 116, 117, 124 and 133 of those tried) bring more work than minicb's own configuration
# serves in steps short enough for the ITL target while turning away at most 10%. These are ones it serves,
# turning away 8 to 29 of the 40 it may; a queue bound tuned to the lesson's seed turns away too many on
# three of them.
SLO_CONFIG = (101, 102, 113, 127, 130)

# Lesson 10 task 2: hot_and_cold_prompts' draws, each served twice: with its hot prologues throughout, and with
# them changed halfway.
EVICTION = (201, 202, 203, 204)

# Lesson 08 task 1: the capstone's workloads, ten, more than the practice seeds, so that a lower edge among
# them is likely.
CAPSTONE = tuple(range(1000, 1010))


def place(index: int, seeds: tuple[int, ...]) -> str:
    """How a failure names a held-out workload: by its place among them, not by its seed."""
    return f"held-out workload {index + 1} of {len(seeds)}"
