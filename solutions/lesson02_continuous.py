"""Lesson 02, the reference: minicb's own steps, in minicb/scheduler/continuous.py, where
ContinuousScheduler.schedule calls them every step."""
from minicb.scheduler.continuous import admit_waiting, schedule_running

__all__ = ["schedule_running", "admit_waiting"]
