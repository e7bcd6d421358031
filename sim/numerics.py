"""NumPy helpers for the TPU's number formats (the widths come from :class:`tpuer.Config`)."""

import numpy as np

__all__ = ["saturate", "check_range"]


def saturate(values, width):
    """Clamp integer ``values`` into ``width``-bit signed range; returns int64."""
    values = np.asarray(values, dtype=np.int64)
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return np.minimum(np.maximum(values, low), high)     # np.clip, at less cost per call


def check_range(name, values, low, high):
    """Raise ``ValueError`` naming ``name`` when any value lies outside ``[low, high]``."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, not {values.dtype}")
    if values.size and (values.min() < low or values.max() > high):
        raise ValueError(f"{name} must lie in [{low}, {high}], found values from "
                         f"{values.min()} to {values.max()}")
    return values.astype(np.int64)
