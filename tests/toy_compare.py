"""Tiny models for the comparison tests: shipped in the package (scalelab.toys)."""

from scalelab.toys import smallconv, wide_fc

__all__ = ["smallconv", "wide_fc"]
