"""Matplotlib figures that Jupyter shows as pictures.

The views build figures with matplotlib.figure.Figure, not pyplot, so that no global state is kept
and a figure is shown once, where it is returned. A bare Figure has no picture of its own, though:
unless the kernel's inline backend happens to have registered a formatter, Jupyter prints its text
form ("<Figure size 550x340 with 1 Axes>"). An image figure carries its own PNG.
"""
from __future__ import annotations

import functools
import io
from typing import Any


@functools.cache
def _image_figure_class() -> type:
    from matplotlib.figure import Figure   # matplotlib loads only when a figure is drawn

    class ImageFigure(Figure):
        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png", dpi=100)
            return buffer.getvalue()

    return ImageFigure


def image_figure(**figure_args: Any):
    """A matplotlib Figure(**figure_args) that Jupyter displays as a PNG."""
    return _image_figure_class()(**figure_args)
