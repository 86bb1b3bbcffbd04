"""Time-to-peak analysis: runs, W&B exports or long tables -> the PODS speedup table and plots.

from pods.analysis import load_runs, summarize, to_markdown, plot_curves
summary = summarize(load_runs("outputs/multirun/..."), rule="paper")
print(to_markdown(summary)); plot_curves(summary, "accuracy_vs_time.png")
"""

from pods.analysis.curves import build_curves, summarize
from pods.analysis.errors import CompareError
from pods.analysis.load import load_inputs, load_long, load_runs, load_wandb_csv, parse_run_name
from pods.analysis.peak import RULES, Curves, Rule, Summary, make_rule, summarize_curves
from pods.analysis.report import plot_curves, summary_frame, to_markdown, write_report

__all__ = [
    "RULES",
    "CompareError",
    "Curves",
    "Rule",
    "Summary",
    "build_curves",
    "load_inputs",
    "load_long",
    "load_runs",
    "load_wandb_csv",
    "make_rule",
    "parse_run_name",
    "plot_curves",
    "summarize",
    "summarize_curves",
    "summary_frame",
    "to_markdown",
    "write_report",
]
