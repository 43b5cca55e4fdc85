"""torch's threads on the CPU, fitted to the cores that other programs leave idle.

OpenMP threads wait for each other at the end of every parallel region. When another program takes one of
two cores, each of a step's hundreds of small regions waits for the thread that lost its core: a SmolLM2
decode step of 16 sequences took 396 ms on two threads, against 132 ms on one (bench/README.md). So before a
step, about once a second, the runner reads how much CPU the other programs used since the last look
(Linux's /proc/stat, less this process's own time) and runs on the cores they left idle. It never runs more
threads than the process had: torch.set_num_threads or OMP_NUM_THREADS sets the most, as before.
"""
from __future__ import annotations

import os
import time

import torch

PERIOD_S = 1.0   # how often the idle cores are measured: a step is tens of ms, a busy program lasts seconds


def busy_seconds(cpus: set[int]) -> float | None:
    """CPU seconds that every program together has used on `cpus` since boot; None where /proc/stat is missing."""
    try:
        lines = open("/proc/stat").read().splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *ticks = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, idle, iowait, *rest = map(int, ticks)
            busy += user + nice + system + sum(rest[:3])   # irq, softirq, steal
    return busy / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    times = os.times()
    return times.user + times.system


class ThreadFitter:
    """Call before each step: sets torch's threads to the idle cores, at most the threads it found."""

    def __init__(self) -> None:
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
        self.most = 0      # the threads the process had: the ceiling
        self.set_to = 0    # the threads this fitter last chose
        self.last: tuple[float, float, float] | None = None   # (wall, everyone's busy, own) seconds

    def __call__(self) -> None:
        threads = torch.get_num_threads()
        if threads != self.set_to:   # first call, or someone else set them: that is the new ceiling
            self.most = self.set_to = threads
        now = time.monotonic()
        if self.last is not None and now - self.last[0] < PERIOD_S:
            return
        busy = busy_seconds(self.cpus)
        if busy is None:
            return
        own = own_seconds()
        if self.last is not None:
            wall, busy_before, own_before = self.last
            others = max(0.0, (busy - busy_before) - (own - own_before)) / (now - wall)   # cores others used
            fit = max(1, min(self.most, int(len(self.cpus) - others + 0.25)))
            if fit != self.set_to:
                torch.set_num_threads(fit)
                self.set_to = fit
        self.last = now, busy, own
