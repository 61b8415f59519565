"""The HTML report: matplotlib figures (Agg) embedded in one self-contained page."""

from scalelab.report.html import ReportInputs, collect_inputs, render_report, write_report

__all__ = ["ReportInputs", "collect_inputs", "render_report", "write_report"]
