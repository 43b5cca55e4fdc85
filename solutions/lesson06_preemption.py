"""Lesson 06, the reference: minicb's own choose_victim and should_swap, in minicb/scheduler/preemption.py,
and an answer to the design task."""
from minicb.request import RequestView
from minicb.scheduler.preemption import choose_victim, should_swap

__all__ = ["choose_victim", "should_swap", "choose_victim_for_latency"]


def choose_victim_for_latency(running: tuple[RequestView, ...]) -> str:
    """Of the least urgent (never the oldest of the most urgent while others run), the one with the most tokens
    still to generate gives way: short requests finish first, as shortest-remaining-time-first does, which
    lowers the mean wait and lengthens the tail."""
    first = min(running, key=lambda r: r.rank)
    least_urgent = max(r.priority for r in running)
    candidates = [r for r in running if r.priority == least_urgent and (r is not first or len(running) == 1)]
    return max(candidates, key=lambda r: (r.max_tokens - r.num_output_tokens, r.rank)).request_id
