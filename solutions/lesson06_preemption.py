"""Lesson 06, the reference: minicb's own choose_victim and should_swap, in minicb/scheduler/preemption.py,
and an answer to the design task."""
from minicb.course.contracts import may_give_way
from minicb.scheduler.preemption import choose_victim, should_swap
from minicb.scheduler.request import RequestView

__all__ = ["choose_victim", "should_swap", "choose_victim_for_latency"]


# What a victim loses, in tokens of work to redo, weighed against what its cap still allows it. Of the weights 1, 3,
# 5 and 8, tried on workloads other than the graded ones, 3 to 8 met both targets and 1 lengthened the tail; 5 is
# in the middle of those that met them.
LOSS_WEIGHT = 5


def choose_victim_for_latency(running: tuple[RequestView, ...]) -> str:
    """Of those the contract allows, the one whose cap allows the most tokens still and that has done the least work
    gives way. The length is unknown, but a large cap hints at a long answer. Most left alone (shortest-
    remaining-time-first by the cap) lowers the mean, but it keeps preempting the same long requests, which then
    end last: the tail. Weighing the computed tokens too spares a request once it has come far, and costs little
    of the mean, since a victim with little computed loses little."""
    return max(may_give_way(running), key=lambda r: ((r.max_tokens - r.num_output_tokens)
                                                     - LOSS_WEIGHT * r.num_computed_tokens, r.rank)).request_id
