"""Lesson 02, the reference: minicb's own scheduler decisions. Read them in
minicb/scheduler/continuous.py, where the engine calls them every step."""
from minicb.scheduler.continuous import plan_admissions, requests_that_leave

__all__ = ["requests_that_leave", "plan_admissions"]
