"""``scalelab report FILES... --out report.html``."""

from __future__ import annotations

EPILOG = """examples:
  scalelab report profile.json plan.json --out report.html
  scalelab report out/*.json --out out/report.html
"""


def register(sub) -> None:
    from scalelab.cli import HelpFormatter

    p = sub.add_parser("report", help="one self-contained HTML report from result files",
                       description="Render profile, plan, run, validation and compare files "
                                   "into one HTML file with embedded figures.",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="scalelab result files (JSON)")
    p.add_argument("--out", default="report.html", help="output HTML file (default report.html)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)


def run(args) -> int:
    from scalelab.cli._common import console
    from scalelab.report import write_report

    path = write_report(args.files, args.out)
    if not args.quiet:
        console.print(f"report written to [bold]{path}[/bold]")
    return 0
