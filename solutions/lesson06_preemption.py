"""Lesson 06, the reference: minicb's own make_room and should_swap, in minicb/scheduler/preemption.py."""
from minicb.scheduler.preemption import make_room, should_swap

__all__ = ["make_room", "should_swap"]
