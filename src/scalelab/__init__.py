"""scalelab: measure one device, model data-parallel training, run it, compare."""

__version__ = "0.1.0"
