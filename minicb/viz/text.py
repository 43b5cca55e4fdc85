"""Seat occupancy as text, for terminals (`make demo`) and plain logs.

One row per seat, one column per step (or per group of steps when the run is long). A request is
drawn with a letter of its own (capital while prefilling), an idle-but-held seat as '.', a held
seat computing padding as ':', and an empty seat as ' '.
"""
from __future__ import annotations

import string

from minicb.stats.trace import DECODE, IDLE, PAD, PREFILL, Trace

LETTERS = string.ascii_lowercase


def occupancy_chart(trace: Trace, width: int = 96) -> str:
    steps = trace.steps
    if not steps:
        return "(no steps)"
    group = max(1, -(-len(steps) // width))
    letter: dict[str, str] = {}
    rows = []
    for seat in range(trace.num_seats):
        cells = []
        for start in range(0, len(steps), group):
            rid, phase = steps[start].occupant(seat)
            if phase in (PREFILL, DECODE):
                ch = letter.setdefault(rid, LETTERS[len(letter) % len(LETTERS)])
                cells.append(ch.upper() if phase == PREFILL else ch)
            else:
                cells.append({IDLE: ".", PAD: ":"}.get(phase, " "))
        rows.append(f"{seat:3d} |{''.join(cells)}|")
    scale = f"one column = {group} step{'s' if group > 1 else ''}; " if group > 1 else ""
    shown = trace.seat_utilization_until(len(steps) - 1)   # of the steps drawn: a long run keeps only its newest
    footer = f"     {scale}{len(steps)} steps, seat utilization {100 * shown:.0f}%"
    return "\n".join(rows + [footer])
