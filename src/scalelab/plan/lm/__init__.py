"""Language models on many GPUs: the step model of one parallel layout on a target.

- :mod:`~scalelab.plan.lm.step`: :class:`LMTarget`, :class:`LMStep`, :func:`lm_step`.
- :mod:`~scalelab.plan.lm.compute`: per-layer compute time from the operations a block
  issues, on the device's dense peaks at the fitted fractions.
- :mod:`~scalelab.plan.lm.memory`: memory per GPU (state, activations, buffers).
- :mod:`~scalelab.plan.lm.fit`: the fit of the compute factors on published runs.

No torch here: the search calls :func:`lm_step` tens of thousands of times.
"""

from scalelab.plan.lm.step import STACKS, LMStep, LMTarget, lm_step

__all__ = ["STACKS", "LMStep", "LMTarget", "lm_step"]
