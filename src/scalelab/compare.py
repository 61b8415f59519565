"""Re-exports of :mod:`scalelab.experiment.compare` (kept for one release)."""

from scalelab.experiment.compare import *  # noqa: F401,F403
from scalelab.experiment.compare import __all__  # noqa: F401
