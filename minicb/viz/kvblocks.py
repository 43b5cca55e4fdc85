"""The KV cache pool, block by block: who owns each block and how full it is, step by step.

Paged reservation hands out blocks as tokens arrive, so owned blocks are (nearly) full; contiguous
reservation books a request's worst case up front, and the hatched reserved-but-empty blocks are the waste.
With prefix caching, a block several sequences share is cross-hatched in its first holder's colour, and
a cached block no sequence holds (kept until evicted) is drawn in its own grey-blue.
"""
from __future__ import annotations

from minicb.stats.trace import Trace
from minicb.viz.draw import PALETTE, Cell, color_of, counters, legend, request_colors, svg, svg_grid, titled

FREE_FILL = "#e6e6e6"
CACHED_FILL = "#a9bcd0"


def _blocks(trace: Trace, step: int) -> list[tuple[str | None, int, int]]:
    blocks = trace.steps[step].kv_blocks if trace.steps else None
    if blocks is None:
        raise ValueError("this trace has no KV block map: build the engine with trace_kv_blocks=True")
    return blocks


def block_size(trace: Trace) -> int:
    """Tokens per block: owned KV slots over owned blocks, else the fullest block seen."""
    for record in trace.steps:
        if record.blocks_used and record.reserved_slots:
            return record.reserved_slots // record.blocks_used
    return max([tokens for r in trace.steps for _, tokens, _ in r.kv_blocks or []] + [1])


def block_state(owner: str | None, tokens: int, holders: int) -> str:
    if owner is None:
        return "cached" if tokens > 0 else "free"
    return "shared" if holders > 1 else "used" if tokens > 0 else "reserved"


def kv_cells(trace: Trace, step: int, columns: int, colors: dict[str, str]) -> list[Cell]:
    size = block_size(trace)
    cells = []
    for i, (owner, tokens, holders) in enumerate(_blocks(trace, step)):
        row, col = divmod(i, columns)
        state = block_state(owner, tokens, holders)
        data = {"block": str(i), "owner": owner or "", "state": state, "tokens": str(tokens),
                "holders": str(holders)}
        if state in ("free", "cached"):
            cells.append(Cell(row, col, FREE_FILL if state == "free" else CACHED_FILL, data=data))
        elif state in ("reserved", "shared"):
            cells.append(Cell(row, col, color_of(colors, owner), "hatch" if state == "reserved" else "cross",
                              data=data))
        else:
            cells.append(Cell(row, col, color_of(colors, owner), level=min(1.0, tokens / size), data=data))
    return cells


def kv_counters(trace: Trace, step: int) -> str:
    states = [block_state(*block) for block in _blocks(trace, step)]
    # Sharing and caching are counted only where prefix caching made some: other views read as before.
    extra = "".join(f" · {state} {states.count(state)}" for state in ("shared", "cached") if state in states)
    return (f"step {step + 1}/{len(trace.steps)} · used {states.count('used')} · "
            f"reserved-empty {states.count('reserved')} · free {states.count('free')}{extra} blocks")


def kv_frame(trace: Trace, step: int, columns: int = 32) -> tuple[list[Cell], int, int, str]:
    """What a GIF frame draws: (cells, rows, columns, caption)."""
    n = len(_blocks(trace, step))
    columns = min(columns, n)
    return (kv_cells(trace, step, columns, request_colors(trace)), -(-n // columns), columns,
            kv_counters(trace, step))


def render_kv_blocks(trace: Trace, step: int, columns: int = 32, title: str | None = None) -> str:
    """The pool as a grid of blocks at `step` (used: filled to tokens/block size), with counters."""
    step = max(0, min(step, len(trace.steps) - 1))
    cells, rows, columns, caption = kv_frame(trace, step, columns)
    cs = max(3, min(16, 880 // columns, 480 // rows))   # big pools get smaller blocks, not a taller page
    patterns: dict[str, str] = {}
    body = svg_grid(cells, patterns, cs, cs, 4, 4, gap=2 if cs >= 8 else 1)
    sample = PALETTE[0]
    swatches = [Cell(0, 0, sample), Cell(0, 0, sample, level=0.5), Cell(0, 0, sample, "hatch"), Cell(0, 0, FREE_FILL)]
    labels = ["used, full", "used, part-filled", "reserved, empty", "free"]
    if any(c.data["state"] in ("shared", "cached") for c in cells):
        swatches += [Cell(0, 0, sample, "cross"), Cell(0, 0, CACHED_FILL)]
        labels += ["shared", "cached, no holder"]
    bottom = 4 + rows * cs
    body += legend(swatches, labels, patterns, 4, bottom + 6)
    width = max(8 + columns * cs, 340)
    return (f'<div class="minicb-kvblocks">{titled("", title)}{svg(width, bottom + 22, patterns, body)}'
            f'{counters(caption)}</div>')
