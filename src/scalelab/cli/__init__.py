"""The ``scalelab`` command: a thin layer over the Python API.

Each subcommand lives in its own module here and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (a callable taking the parsed arguments and returning an exit
code). Modules are discovered, so adding a command is adding a file.

Exit codes: 0 success; 2 bad input or usage (one line on stderr); 1 a failure while running.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from scalelab.errors import RunFailure, UsageError


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written; every option with a default shows it (unless its help does)."""

    def _format_action(self, action):
        default = action.default
        shown = (action.option_strings and default not in (None, False, argparse.SUPPRESS)
                 and default != [] and "default" not in (action.help or ""))
        if shown and action.help is not argparse.SUPPRESS:
            import copy

            action = copy.copy(action)
            action.help = ((action.help or "").rstrip() + " (default: %(default)s)").lstrip()
        return super()._format_action(action)


def build_parser() -> Parser:
    parser = Parser(
        prog="scalelab",
        description="Profile one device, plan data-parallel training, run it, compare.",
        formatter_class=HelpFormatter,
    )
    from scalelab import __version__

    parser.add_argument("--version", action="version", version=f"scalelab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def fail(code: int, message: str) -> int:
    print(f"scalelab: error: {message}", file=sys.stderr)
    return code


def _check_outputs(args) -> None:
    """A file to write (``--out``, ``--plot``) named as an existing folder is refused before
    the command runs, not after (a validation runs for minutes first)."""
    from pathlib import Path

    for flag in ("out", "plot"):
        value = getattr(args, flag, None)
        if value and not (flag == "out" and getattr(args, "out_is_folder", False)) \
                and Path(value).is_dir():
            raise UsageError(f"--{flag} {value} is a folder; give a file's name")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_outputs(args)
        code = int(args.func(args) or 0)
    except UsageError as e:  # one line, whatever a message it quotes holds
        code = fail(2, " ".join(str(e).split()))
    except RunFailure as e:
        code = fail(1, str(e))
    except KeyboardInterrupt:
        code = fail(130, "interrupted")
    entry = sys.modules.get("scalelab.runner.entry")
    if argv is None and entry is not None and entry.opened_process_group:
        # a torchrun rank: an abort in finalization would read to torchrun as a failed rank
        from scalelab.runner.launch import leave

        leave(code)
    return code
