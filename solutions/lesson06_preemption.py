"""Lesson 06, the reference: minicb's own policy, victim and should_swap in minicb/scheduler/policy.py."""
from minicb.scheduler.policy import should_swap
from minicb.scheduler.policy import victim as choose_victim

__all__ = ["choose_victim", "should_swap"]
