"""Write a Summary out: Markdown for people, CSV for tools, PNG curves for eyes.

Every output names the rule that made it, because the headline speedup depends
on the rule (threshold fraction, reference curve, how times are read).
"""

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pods.analysis.curves import window_text, x_unit
from pods.analysis.peak import Curves, Summary, mean_curve

AXIS_SLUG = {"train_time": "time", "step": "step", "rollouts": "rollouts"}
TESTS_TEXT = (
    "speedup 95% CI = percentile bootstrap over seeds (seeds resampled with replacement "
    "within each variant, threshold recomputed, {n_boot} resamples, seed {seed}); "
    "p_boot = one-sided, share of bootstrap speedups <= 1 (H1: speedup > 1); "
    "p_perm = one-sided exact permutation test on the ranks of per-seed times to the "
    "threshold, never-reached seeds ranked slowest (H1: the variant is faster)"
)


def grid_text(summary: Summary) -> str:
    """The checkpoint grid, its unit and the window, in one line."""
    unit = x_unit(summary.x_label)
    if summary.grid_step is None:
        where = "the union of every eval's x (no --grid-step)"
    else:
        where = (
            f"checkpoints every {summary.grid_step:g} {unit} (0, {summary.grid_step:g}, "
            f"{2 * summary.grid_step:g}, ...)"
        )
    return (
        f"{where}; window {window_text(summary.x_min, summary.x_max)} {unit}; {summary.rule.gap_text()}; "
        "T = 0 is plotted, not scored; a mean curve is defined where every seed has a value"
    )


def runs_text(summary: Summary) -> list[str]:
    """variant <- its runs, one line each: the grouping the table used."""
    return [
        f"{name} <- {', '.join(c.runs)} ({len(c.runs)} seed{'s' * (len(c.runs) > 1)})"
        for name, c in summary.curves.items()
    ]


def plot_name(metric: str, axis: str) -> str:
    """accuracy_vs_time.png for eval/accuracy against train_time."""
    return f"{metric.split('/')[-1]}_vs_{AXIS_SLUG.get(axis, axis)}.png"


def plot_title(summary: Summary) -> str:
    return f"{summary.metric}: rule {summary.rule.name}, threshold {summary.threshold:.3f}"


def speedup_note(row: dict, baseline_time: float) -> str:
    """Why a speedup is missing, or '' when there is one."""
    if not np.isfinite(baseline_time):
        return "baseline not reached"
    return "" if np.isfinite(row["time"]) else "not reached"


def summary_frame(summary: Summary) -> pd.DataFrame:
    """One row per variant, numbers as numbers, plus the rule on every row."""
    base_time = summary.rows[0]["time"]
    rows = []
    for row in summary.rows:
        row = dict(row, seed_times=";".join(f"{t:g}" for t in row["seed_times"]))
        row["speedup_note"] = speedup_note(row, base_time)
        if row["speedup_note"]:
            row["speedup"] = np.nan
        row["time"] = row["time"] if np.isfinite(row["time"]) else np.nan
        row["runs"] = ";".join(summary.curves[row["variant"]].runs)
        rows.append(row)
    meta = {
        "metric": summary.metric,
        "x": summary.x_label,
        "baseline": summary.baseline,
        "threshold": summary.threshold,
        "rule": summary.rule.name,
        "threshold_frac": summary.rule.threshold,
        "reference": summary.rule.reference,
        "time_read": summary.rule.time_read,
        "max_gap": summary.rule.max_gap,
        "grid_step": summary.grid_step,
        "x_unit": x_unit(summary.x_label),
        "x_min": summary.x_min,
        "x_max": summary.x_max,
        "rule_description": summary.rule.describe(),
        "grid": grid_text(summary),
        "warnings": " | ".join(summary.warnings),
        "grouping": " | ".join(summary.grouping),
        "n_boot": summary.n_boot,
        "tests": TESTS_TEXT.format(n_boot=summary.n_boot, seed=summary.seed),
    }
    return pd.DataFrame(rows).assign(**meta)


def _f(v: float, fmt: str = ".3f") -> str:
    return "n/a" if v is None or np.isnan(v) else format(v, fmt)


def _cells(row: dict, summary: Summary) -> list[str]:
    """One Markdown table row."""
    note = speedup_note(row, summary.rows[0]["time"])
    if row["variant"] == summary.baseline:
        speed = "1.00x (baseline)"
    elif note:
        speed = note
    else:
        ci = f" [{row['speedup_lo']:.2f}, {row['speedup_hi']:.2f}]"
        speed = f"{row['speedup']:.2f}x" + (ci if not np.isnan(row["speedup_lo"]) else "")
    return [
        row["variant"],
        str(row["n_seeds"]),
        f"{_f(row['peak_mean'])} ± {_f(row['peak_std'])} [{_f(row['peak_min'])}, {_f(row['peak_max'])}]",
        f"{_f(row['curve_peak'])} @ {_f(row['curve_peak_x'], '.4g')}",
        f"{_f(row['final_mean'])} ± {_f(row['final_std'])}",
        "not reached" if np.isinf(row["time"]) else format(row["time"], ".4g"),
        f"{row['seeds_reached']}/{row['n_seeds']}",
        speed,
        _f(row["p_boot"]),
        _f(row["p_perm"]),
    ]


def to_markdown(summary: Summary) -> str:
    """The comparison as Markdown: how it was made, then the table."""
    head = [
        "variant",
        "seeds",
        "peak (mean ± std [min, max])",
        "mean-curve peak @ x",
        "final (mean ± std)",
        f"time to threshold ({summary.x_label})",
        "seeds reached",
        "speedup [95% CI]",
        "p_boot",
        "p_perm",
    ]
    lines = [
        f"## Time to threshold: {summary.metric} vs {summary.x_label}",
        "",
        f"- rule: {summary.rule.describe()}",
        f"- threshold: {summary.threshold:.4f} ({summary.rule.threshold:g} x the peak of "
        f"baseline '{summary.baseline}')",
        f"- time read: {summary.rule.time_read}",
        f"- {summary.rule.gap_text()}",
        f"- grid: {grid_text(summary)}",
        f"- tests: {TESTS_TEXT.format(n_boot=summary.n_boot, seed=summary.seed)}",
        *[f"- {line}" for line in summary.grouping],
        "- runs (variant <- runs):",
        *[f"  - {line}" for line in runs_text(summary)],
        *[f"- warning: {w}" for w in summary.warnings],
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(_cells(r, summary)) + " |" for r in summary.rows]
    return "\n".join(lines) + "\n"


def _band(values: np.ndarray, band: str) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper edge of the seed band; NaN where any seed lacks a value."""
    if band == "std":
        mc, sd = mean_curve(values), values.std(axis=0, ddof=1 if len(values) > 1 else 0)
        return mc - sd, mc + sd
    return values.min(axis=0), values.max(axis=0)


def plot_curves(
    data: Summary | dict[str, Curves],
    path: str | Path | None = None,
    band: str = "minmax",
    threshold: float | None = None,
    x_label: str | None = None,
    y_label: str | None = None,
    title: str | None = None,
) -> Figure:
    """Mean curve per variant with a min-max (or +-std) band over seeds.

    Given a Summary, also draws its threshold, marks each variant's time to it,
    and titles the plot with the rule. Saved to `path` when given.
    """
    summary = data if isinstance(data, Summary) else None
    curves = summary.curves if summary else data
    if summary:
        threshold = summary.threshold if threshold is None else threshold
        x_label, y_label = x_label or summary.x_label, y_label or summary.metric
        title = title or plot_title(summary)
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)  # Agg, without pyplot's global backend: safe in notebooks and on servers
    ax = fig.subplots()
    for i, (name, c) in enumerate(curves.items()):
        color = f"C{i % 10}"
        lo, hi = _band(c.values, band)
        ax.plot(c.grid, mean_curve(c.values), color=color, label=f"{name} (n={len(c.runs)})")
        ax.fill_between(c.grid, lo, hi, color=color, alpha=0.2, linewidth=0)
        row = next((r for r in summary.rows if r["variant"] == name), None) if summary else None
        if row and np.isfinite(row["time"]):
            ax.axvline(row["time"], color=color, linestyle=":", linewidth=1)
    if threshold is not None and np.isfinite(threshold):
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label="threshold")
    ax.set(xlabel=x_label or "x", ylabel=y_label or "value", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def write_report(
    summary: Summary,
    out_dir: str | Path,
    extra_curves: dict[str, dict[str, Curves]] | None = None,
    band: str = "minmax",
) -> list[Path]:
    """summary.md, summary.csv and one PNG per axis (summary's plus `extra_curves`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(to_markdown(summary))
    summary_frame(summary).to_csv(out / "summary.csv", index=False)
    written = [out / "summary.md", out / "summary.csv", out / plot_name(summary.metric, summary.x)]
    plot_curves(summary, written[-1], band)
    for axis, curves in (extra_curves or {}).items():
        written.append(out / plot_name(summary.metric, axis))
        args = (summary.threshold, axis, summary.metric, plot_title(summary))
        plot_curves(curves, written[-1], band, *args)
    return written
