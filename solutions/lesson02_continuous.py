"""Lesson 02, the reference: minicb's own plan, in minicb/scheduler/planner.py, which
ContinuousScheduler.schedule asks for every step."""
from minicb.scheduler.planner import plan_step

__all__ = ["plan_step"]
