"""Models for validation tests and benchmarks: shipped in the package (scalelab.toys)."""

from scalelab.toys import alexnet_like, conv_heavy, tiny

__all__ = ["alexnet_like", "conv_heavy", "tiny"]
