"""Re-exports of :mod:`scalelab.plan` under the module's former name (kept one release)."""

from scalelab.plan import *  # noqa: F401,F403
from scalelab.plan import __all__  # noqa: F401
