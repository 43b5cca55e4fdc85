"""Value checks shared by everything that validates user input (configs, sampling params, prompts)."""
from __future__ import annotations

import math


def is_int(value: object) -> bool:
    """An integer, and not a bool: True is an int to Python, but never a size, an id or a seed."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A finite int or float that fits a float. NaN fails every comparison, so bound checks let it through."""
    if not (is_int(value) or isinstance(value, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:   # an int past the largest float, ~1.8e308
        return False
