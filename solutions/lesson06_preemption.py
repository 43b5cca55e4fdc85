"""Lesson 06, the reference: minicb's own choose_victim and should_swap, in minicb/scheduler/preemption.py,
and an answer to the design task."""
from minicb.request import RequestView
from minicb.scheduler.preemption import choose_victim, may_give_way, should_swap

__all__ = ["choose_victim", "should_swap", "choose_victim_for_latency"]


def choose_victim_for_latency(running: tuple[RequestView, ...]) -> str:
    """Of the least urgent (never the oldest of the most urgent while others run), the one with the most tokens
    still to generate gives way: short requests finish first, as shortest-remaining-time-first does, which
    lowers the mean wait and lengthens the tail."""
    return max(may_give_way(running), key=lambda r: (r.max_tokens - r.num_output_tokens, r.rank)).request_id
