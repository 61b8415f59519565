"""One function per figure, one module per stage. Each takes loaded result dicts and returns
PNG bytes, or None when the files hold nothing to draw. Fields missing from a file are
skipped, not guessed."""

from scalelab.report.figures._style import COLORS, PHASES
from scalelab.report.figures.experiment import breakdown, compare, plot_validation, validation
from scalelab.report.figures.plan import plot_plan, scaling
from scalelab.report.figures.profile import algorithms, batch_scaling

__all__ = ["COLORS", "PHASES", "algorithms", "batch_scaling", "breakdown", "compare",
           "plot_plan", "plot_validation", "scaling", "validation"]
