"""What Jupyter shows: matplotlib figures as pictures, and widgets with a text form a reader understands.

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


def widget_bundle(owner: object, box, **kwargs) -> dict:
    """`box`'s display bundle, with a sentence for its text form. Where the widget cannot be drawn (a
    saved notebook before its kernel runs, a terminal) the reader sees what it is and how to see it,
    not "VBox(children=(HBox(children=(Play(..."."""
    bundle = box._repr_mimebundle_(**kwargs)
    bundle["text/plain"] = (f"[{type(owner).__name__}: an interactive widget. Run this cell in JupyterLab "
                            "to see it.]")
    return bundle
