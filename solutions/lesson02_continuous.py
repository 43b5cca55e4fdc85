"""Lesson 02, the reference: minicb's own plan, in minicb/scheduler/plan.py, which
ContinuousScheduler.schedule asks for every step."""
from minicb.scheduler.plan import plan_step

__all__ = ["plan_step"]
