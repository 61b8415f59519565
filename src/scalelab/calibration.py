"""Re-exports of :mod:`scalelab.experiment.calibrate` (kept for one release)."""

from scalelab.experiment.calibrate import *  # noqa: F401,F403
from scalelab.experiment.calibrate import __all__  # noqa: F401
