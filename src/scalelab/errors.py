"""Error types the CLI maps to exit codes.

``UsageError`` (a ``ValueError``) is a user mistake: the CLI prints its message as one line
on stderr and exits 2. ``RunFailure`` is a failure while running (a rank died, a timeout):
one line naming what failed and where, exit 1.
"""

import math


class UsageError(ValueError):
    """Bad input or usage: one line, exit code 2."""


class RunFailure(RuntimeError):
    """A failure while running: what failed and where, exit code 1."""


def is_number(v) -> bool:
    """Whether ``v`` is what a number in an input file must be: a finite int or float (TOML
    and JSON readers give inf and nan; a bool is no number here)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def number_wanted(v) -> str:
    """What a value that :func:`is_number` refuses should have been: "a finite number" for
    an infinite or nan float, else "a number"."""
    return "a finite number" if isinstance(v, float) else "a number"
