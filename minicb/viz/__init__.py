"""Views of a trace. Each is a pure function of the trace; widgets are thin wrappers over them.

render_* return HTML strings (inline SVG); SlotOccupancy, KVBlockMap and Timeline play them step by step in
Jupyter (ipywidgets, imported only when a widget is made); save_* write them out for pages and READMEs.
"""
from minicb.viz.export import save_gif, save_html, save_png
from minicb.viz.kvblocks import KVBlockMap, render_kv_blocks
from minicb.viz.slots import SlotOccupancy, render_slots
from minicb.viz.text import occupancy_chart
from minicb.viz.timeline import Timeline, latency_cdf, render_timeline

__all__ = ["SlotOccupancy", "KVBlockMap", "Timeline", "render_slots", "render_kv_blocks", "render_timeline",
           "latency_cdf", "save_html", "save_gif", "save_png", "occupancy_chart"]
