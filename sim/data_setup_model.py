"""Golden model of the diagonal skew: each lane is a delay line."""

import numpy as np

__all__ = ["skew"]


def skew(vectors, delays, fill=0):
    """Lane ``k`` of ``vectors`` (cycles x lanes) delayed by ``delays[k]`` cycles, padded
    with ``fill``, with the same number of cycles as the input."""
    vectors = np.asarray(vectors)
    out = np.full_like(vectors, fill)
    for lane, delay in enumerate(delays):
        if delay < len(vectors):
            out[delay:, lane] = vectors[:len(vectors) - delay, lane]
    return out
