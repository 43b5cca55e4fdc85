"""Lesson 06, the reference: minicb's own choose_victim and should_swap, in minicb/scheduler/preemption.py,
and an answer to the design task."""
from minicb.request import RequestView
from minicb.scheduler.preemption import choose_victim, may_give_way, should_swap

__all__ = ["choose_victim", "should_swap", "choose_victim_for_latency"]


# What a victim loses, in tokens of work to redo, weighed against what it has left. Of the weights 2, 3, 5 and 8,
# tried on workloads other than the graded ones, 5 kept the mean within a point of the best and the tail near
# the shortest.
LOSS_WEIGHT = 5


def choose_victim_for_latency(running: tuple[RequestView, ...]) -> str:
    """Of those the contract allows, the one with the most tokens still to generate and the least work done gives
    way. Most left alone (shortest-remaining-time-first) lowers the mean most, but it keeps preempting the same
    long requests, which then end last: the tail. Weighing the computed tokens too spares a request once it
    has come far, and costs little of the mean, since a victim with little computed loses little."""
    return max(may_give_way(running), key=lambda r: ((r.max_tokens - r.num_output_tokens)
                                                     - LOSS_WEIGHT * r.num_computed_tokens, r.rank)).request_id
