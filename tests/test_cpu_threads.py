"""minicb.runner.cpu_threads: torch's threads follow the cores other programs leave idle, never above the ceiling."""
from __future__ import annotations

import pytest
import torch

from minicb.runner import cpu_threads
from minicb.runner.cpu_threads import ThreadFitter


@pytest.fixture
def machine(monkeypatch):
    """A 2-core machine whose clock, total CPU use and own CPU use the test moves by hand."""
    state = {"now": 100.0, "busy": 0.0, "own": 0.0}
    monkeypatch.setattr(cpu_threads.time, "monotonic", lambda: state["now"])
    monkeypatch.setattr(cpu_threads, "busy_seconds", lambda cpus: state["busy"])
    monkeypatch.setattr(cpu_threads, "own_seconds", lambda: state["own"])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield state
    torch.set_num_threads(before)


def advance(state: dict, seconds: float, own: float, others: float) -> None:
    """`seconds` of wall time in which this process used `own` cores and other programs `others`."""
    state["now"] += seconds
    state["own"] += own * seconds
    state["busy"] += (own + others) * seconds


def test_threads_follow_the_idle_cores_up_to_the_ceiling(machine):
    fit = ThreadFitter()
    fit.cpus = {0, 1}
    fit()
    advance(machine, 1.5, own=2.0, others=0.0)
    fit()
    assert torch.get_num_threads() == 2
    advance(machine, 1.5, own=1.0, others=1.0)   # a busy loop took a core
    fit()
    assert torch.get_num_threads() == 1
    advance(machine, 0.5, own=1.0, others=0.0)   # too soon to look again
    fit()
    assert torch.get_num_threads() == 1
    advance(machine, 1.0, own=1.0, others=0.1)   # the loop ended: a little noise is not a program
    fit()
    assert torch.get_num_threads() == 2


def test_someone_elses_thread_count_is_the_new_ceiling(machine):
    fit = ThreadFitter()
    fit.cpus = {0, 1}
    fit()
    torch.set_num_threads(1)   # the server leaves a core to its event loop
    advance(machine, 2.0, own=1.0, others=0.0)
    fit()
    assert torch.get_num_threads() == 1


def test_without_proc_stat_nothing_changes(machine, monkeypatch):
    monkeypatch.setattr(cpu_threads, "busy_seconds", lambda cpus: None)
    fit = ThreadFitter()
    fit()
    advance(machine, 2.0, own=1.0, others=2.0)
    fit()
    assert torch.get_num_threads() == 2


def test_this_machine_reports_its_cpu_time():
    fit = ThreadFitter()
    assert cpu_threads.own_seconds() > 0
    busy = cpu_threads.busy_seconds(fit.cpus)
    assert busy is None or busy > 0
