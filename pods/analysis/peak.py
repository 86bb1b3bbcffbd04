"""Time-to-threshold math: the PODS headline and its error bars.

The paper's recipe ("at least 1.7x"), as its authors' plotting scripts read runs:
for each run and each checkpoint T of a fixed grid, take the eval nearest in time
to T however far it lies; average the seeds at each T into a mean curve; the
threshold is 99% of vanilla GRPO's mean-curve maximum over the checkpoints T > 0
in the window (the budget); a variant's time is the first T > 0 at which its mean
curve reaches the threshold; speedup = GRPO's time / the variant's. The number
moves with every knob of that recipe (100% of the peak gives 1.6x instead of
2.0x), so each knob is a field of `Rule` and every output says which rule made it.
T = 0 is the start, before any training: it is plotted but never scored.

Pure numpy. Curves live on a shared grid (curves.py puts runs there): arrays are
(..., G) over grid points and (..., S, G) over seeds. NaN = no value at that
point, inf = the threshold is never reached.
"""

from dataclasses import dataclass, field, replace
from itertools import combinations
from math import comb

import numpy as np

from pods.analysis.errors import CompareError

TIME_READS = ("nearest", "at-or-before", "interpolate")
REFERENCES = ("mean", "per-seed")

_READ_TEXT = {
    "nearest": "first checkpoint T > 0 whose value is >= threshold, each checkpoint read at the "
    "eval nearest in time to it (ties: the earlier eval)",
    "at-or-before": "first checkpoint T > 0 whose last eval at or before T is >= threshold",
    "interpolate": "linear interpolation between the two evals that bracket the crossing (T > 0)",
}
_REF_TEXT = {
    "mean": "read on each variant's mean curve over seeds; threshold = {f:g} x the "
    "baseline's mean-curve peak over T > 0",
    "per-seed": "read on each seed's curve, then averaged over seeds (not reached if any "
    "seed never reaches); threshold = {f:g} x the mean of the baseline's per-seed peaks over T > 0",
}


@dataclass(frozen=True)
class Rule:
    """How a time-to-threshold is read. The defaults are the paper's."""

    threshold: float = 0.99  # fraction of the baseline peak a curve must reach
    reference: str = "mean"  # "mean" curve over seeds, or "per-seed" curves then averaged
    time_read: str = "nearest"  # one of TIME_READS, see _READ_TEXT
    # None: a checkpoint reads its eval however far it lies (the authors' read); a number
    # (x units): a checkpoint whose eval lies farther than this has no value (NaN)
    max_gap: float | None = None
    name: str = "paper"

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise CompareError(f"reference={self.reference!r}; choose one of {REFERENCES}")
        if self.time_read not in TIME_READS:
            raise CompareError(f"time_read={self.time_read!r}; choose one of {TIME_READS}")
        if not 0 < self.threshold <= 1.5:
            raise CompareError(
                f"threshold={self.threshold}: give a fraction of the peak (0.99), not a percentage"
            )
        if self.max_gap is not None and not (np.isfinite(self.max_gap) and self.max_gap >= 0):
            raise CompareError(f"max_gap={self.max_gap}: give a distance >= 0 in the x unit, or none")

    def describe(self) -> str:
        ref = _REF_TEXT[self.reference].format(f=self.threshold)
        return f"{self.name}: times {ref}; time = {_READ_TEXT[self.time_read]}; {self.gap_text()}"

    def gap_text(self) -> str:
        if self.max_gap is None:
            return "max gap: none (a checkpoint reads its eval however far it lies)"
        return f"max gap: {self.max_gap:g} (a checkpoint with no eval within {self.max_gap:g} has no value)"


RULES = {
    "paper": Rule(),
    "strict": Rule(threshold=1.0, time_read="at-or-before", name="strict"),
}


def make_rule(
    rule: str | Rule = "paper",
    threshold: float | None = None,
    reference: str | None = None,
    time_read: str | None = None,
    max_gap: float | None = None,
) -> Rule:
    """A preset from RULES with optional overrides; the name records what changed."""
    if isinstance(rule, str):
        if rule not in RULES:
            raise CompareError(f"unknown rule {rule!r}; valid rules: {', '.join(sorted(RULES))}")
        rule = RULES[rule]
    asked = dict(threshold=threshold, reference=reference, time_read=time_read, max_gap=max_gap)
    changes = {k: v for k, v in asked.items() if v is not None and v != getattr(rule, k)}
    if not changes:
        return rule
    name = (
        rule.name + "+" + ",".join(f"{k}={v:g}" if k == "max_gap" else f"{k}={v}" for k, v in changes.items())
    )
    return replace(rule, name=name, **changes)


def mean_curve(values: np.ndarray) -> np.ndarray:
    """(..., S, G) -> (..., G). NaN wherever any seed lacks a value (only possible
    with a max gap or before a run's first eval), so the mean curve never silently
    averages over a changing set of survivors."""
    return values.mean(axis=-2)


def peak(values: np.ndarray) -> np.ndarray:
    """Max over the last axis, ignoring NaN; NaN (not a warning) for all-NaN rows."""
    best = np.where(np.isnan(values), -np.inf, values).max(axis=-1)
    return np.where(np.isneginf(best), np.nan, best)


def time_to_threshold(
    grid: np.ndarray, values: np.ndarray, threshold: float | np.ndarray, interpolate: bool = False
) -> np.ndarray:
    """First x at which each curve reaches `threshold`; inf if it never does.

    Args:
        grid: (G,) increasing x values.
        values: (..., G) curves on the grid; NaN never counts as reached.
        threshold: scalar or array broadcastable to values.shape[:-1].
        interpolate: place the crossing on the line between the grid point before
            the first hit and the hit, instead of at the hit.

    Returns:
        (...) float array of times.
    """
    thr = np.asarray(threshold, dtype=float)[..., None]
    hit = values >= thr  # NaN >= x is False
    k = hit.argmax(axis=-1)
    t = grid[k]
    if interpolate:
        before = np.take_along_axis(values, np.maximum(k - 1, 0)[..., None], -1)[..., 0]
        at = np.take_along_axis(values, k[..., None], -1)[..., 0]
        ok = (k > 0) & ~np.isnan(before)  # a hit at the first point has nothing to bracket it
        t0 = grid[np.maximum(k - 1, 0)]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(ok, t0 + (thr[..., 0] - before) / (at - before) * (t - t0), t)
    return np.where(hit.any(axis=-1), t, np.inf)


def speedup(t_base: np.ndarray | float, t_var: np.ndarray | float) -> np.ndarray:
    """Baseline time over variant time. IEEE division already says the right thing:
    inf if only the variant reaches, 0 if only the baseline does, NaN if neither."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(t_base, dtype=float) / np.asarray(t_var, dtype=float)


def after_start(grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(..., G) values with the checkpoints T <= 0 blanked (NaN): the start is read
    before any training, so it sets no peak and no time."""
    return np.where(np.asarray(grid) > 0, values, np.nan)


def rule_threshold(values: np.ndarray, rule: Rule) -> np.ndarray:
    """Absolute threshold from the baseline's (..., S, G) curves."""
    ref = peak(mean_curve(values)) if rule.reference == "mean" else peak(values).mean(axis=-1)
    return rule.threshold * ref


def variant_time(
    grid: np.ndarray, values: np.ndarray, threshold: np.ndarray | float, rule: Rule
) -> np.ndarray:
    """Time-to-threshold of a variant's (..., S, G) curves under `rule` -> (...)."""
    interp = rule.time_read == "interpolate"
    if rule.reference == "mean":
        return time_to_threshold(grid, mean_curve(values), threshold, interp)
    per_seed = time_to_threshold(grid, values, np.expand_dims(threshold, -1), interp)
    return per_seed.mean(axis=-1)  # inf if any seed never reaches


def resample_seeds(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(S, G) -> (B, S, G): seeds drawn with replacement, B times."""
    return values[rng.integers(0, len(values), size=(n_boot, len(values)))]


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval ignoring NaN. inverted_cdf picks order statistics, so
    inf (baseline never reached) and 0 (variant never reached) stay meaningful."""
    s = samples[~np.isnan(samples)]
    if s.size == 0:
        return np.nan, np.nan
    lo, hi = np.quantile(s, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(lo), float(hi)


def bootstrap_pvalue(samples: np.ndarray) -> float:
    """One-sided p for H1: speedup > 1 -- the share of bootstrap speedups <= 1."""
    s = samples[~np.isnan(samples)]
    return float(np.mean(s <= 1.0)) if s.size else np.nan


def average_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing their average rank (inf ties with inf)."""
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2)[inverse]


def rank_sum_null(
    t_base: np.ndarray, t_var: np.ndarray, max_exact: int = 20_000, seed: int = 0
) -> tuple[np.ndarray, float]:
    """The rank-sum statistic's permutation null and its observed value for one comparison.

    The statistic is the mean rank of baseline times minus that of variant times, so seeds that never
    reach (inf) simply rank slowest. The null runs over all splits of the pooled times when there are at
    most `max_exact`, else over that many random ones. Returns (null statistics, observed statistic).
    """
    nb, nv = len(t_base), len(t_var)
    ranks = average_ranks(np.concatenate([t_base, t_var]))
    total = ranks.sum()

    def stat(base_rank_sum: np.ndarray) -> np.ndarray:
        return base_rank_sum / nb - (total - base_rank_sum) / nv

    if comb(nb + nv, nb) <= max_exact:
        splits = np.array(list(combinations(range(nb + nv), nb)))  # (C, nb)
    else:
        rng = np.random.default_rng(seed)
        splits = np.argsort(rng.random((max_exact, nb + nv)), axis=1)[:, :nb]
    return stat(ranks[splits].sum(axis=1)), float(stat(ranks[:nb].sum()))


def permutation_pvalue(
    t_base: np.ndarray, t_var: np.ndarray, max_exact: int = 20_000, seed: int = 0
) -> float:
    """One-sided permutation test that the variant's per-seed times are shorter (`rank_sum_null`)."""
    t_base, t_var = t_base[~np.isnan(t_base)], t_var[~np.isnan(t_var)]
    if len(t_base) == 0 or len(t_var) == 0:
        return np.nan
    null, observed = rank_sum_null(t_base, t_var, max_exact, seed)
    return float(np.mean(null >= observed - 1e-9))


def spread(x: np.ndarray) -> dict[str, float]:
    """Mean, sample std (NaN for one seed: no spread is known), min and max."""
    x = np.asarray(x, dtype=float)
    return {
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if len(x) > 1 else np.nan,
        "min": float(x.min()),
        "max": float(x.max()),
    }


def pick_baseline(variants: list[str], plain: dict[str, bool] | None = None) -> str:
    """The one variant whose runs' saved configs are plain GRPO (`plain`: variant -> no prefilter, no
    dynamic sampling, no down-sampling, n == m; pods.analysis.load.is_plain_grpo). Names are not read:
    refuse, listing the variants, when none or several are plain (unless there is a single variant)."""
    if len(variants) == 1:
        return variants[0]
    plain = plain or {}
    found = [v for v in variants if plain.get(v)]
    if len(found) == 1:
        return found[0]
    if found:
        why = f"several are plain GRPO (no prefilter, no dynamic sampling, no down-sampling, n == m): {', '.join(found)}"
    elif not any(v in plain for v in variants):
        why = "no run has a saved config.yaml to tell it by"
    else:
        why = "none is plain GRPO (no prefilter, no dynamic sampling, no down-sampling, n == m)"
    raise CompareError(f"which variant is the baseline? {why}; choose --baseline from: {', '.join(variants)}")


def one_seed_warnings(curves: dict[str, "Curves"]) -> list[str]:
    """A warning for every variant with a single run: no spread, weak tests."""
    return [
        f"variant '{n}' has one seed (run '{c.runs[0]}'): no spread, its interval and p-values "
        "say little; if the run name holds a seed, pass --name-pattern"
        for n, c in curves.items()
        if len(c.runs) == 1
    ]


@dataclass
class Curves:
    """One variant's seeds on the shared grid."""

    grid: np.ndarray  # (G,) shared by every variant of a comparison
    values: np.ndarray  # (S, G) each seed read on the grid, NaN outside its span
    runs: list[str]  # (S,) run names
    peaks: np.ndarray  # (S,) each run's best value at the checkpoints T > 0 (inside the window)
    finals: np.ndarray  # (S,) each run's last value read on the grid


@dataclass
class Summary:
    """The comparison table plus everything needed to say how it was made."""

    rows: list[dict]  # one per variant, baseline first
    rule: Rule
    baseline: str
    threshold: float  # absolute: rule.threshold x the baseline's reference peak
    curves: dict[str, Curves]
    n_boot: int
    seed: int
    metric: str = "value"
    x: str = "x"  # the axis: train_time, step or rollouts
    x_label: str = "x"  # the column it came from, e.g. eval/time in a W&B export
    grid_step: float | None = None  # checkpoint spacing in x_label's unit; None: union of eval x
    x_min: float | None = None  # the window (budget) in x_label's unit; None: open
    x_max: float | None = None
    warnings: list[str] = field(default_factory=list)
    grouping: list[str] = field(default_factory=list)  # how the runs became rows (pods.analysis.groups)


def scored_curves(c: Curves) -> Curves:
    """The curves the rule reads: the start (T <= 0) blanked, peaks over T > 0."""
    values = after_start(c.grid, c.values)
    return replace(c, values=values, peaks=peak(values))


def variant_row(c: Curves, threshold: float, rule: Rule) -> dict:
    """Peak, final and time-to-threshold of one variant (no comparison yet)."""
    mc = mean_curve(c.values)
    defined = np.flatnonzero(~np.isnan(mc))
    best = int(defined[np.argmax(mc[defined])]) if defined.size else None
    seed_t = time_to_threshold(c.grid, c.values, threshold, rule.time_read == "interpolate")
    pk, fin = spread(c.peaks), spread(c.finals)
    return {
        "n_seeds": len(c.runs),
        **{f"peak_{k}": v for k, v in pk.items()},
        "curve_peak": float(mc[best]) if best is not None else np.nan,
        "curve_peak_x": float(c.grid[best]) if best is not None else np.nan,
        **{f"final_{k}": v for k, v in fin.items()},
        "curve_final": float(mc[defined[-1]]) if defined.size else np.nan,
        "time": float(variant_time(c.grid, c.values, threshold, rule)),
        "seeds_reached": int(np.isfinite(seed_t).sum()),
        "seed_times": seed_t,
    }


def bootstrap_speedups(
    curves: dict[str, Curves], baseline: str, rule: Rule, n_boot: int, seed: int, chunk: int = 250
) -> dict[str, np.ndarray]:
    """Speedup of every other variant over `baseline` per bootstrap replicate -> (n_boot,).

    A replicate resamples each variant's seeds with replacement (the baseline's once,
    shared by all variants) and recomputes threshold, times and speedups. Chunked so
    memory stays (chunk, S, G) however many replicates are asked for.
    """
    rng = np.random.default_rng(seed)
    base, others = curves[baseline], [n for n in curves if n != baseline]
    out: dict[str, list[np.ndarray]] = {n: [] for n in others}
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        boot_base = resample_seeds(base.values, b, rng)
        thr = rule_threshold(boot_base, rule)
        t_base = variant_time(base.grid, boot_base, thr, rule)
        for n in others:
            boot = resample_seeds(curves[n].values, b, rng)
            out[n].append(speedup(t_base, variant_time(base.grid, boot, thr, rule)))
    return {n: np.concatenate(v) if v else np.array([]) for n, v in out.items()}


def summarize_curves(
    curves: dict[str, Curves],
    rule: Rule,
    baseline: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Summary:
    """Compare every variant with the baseline under `rule`.

    Args:
        curves: variant -> its seeds on one shared grid.
        rule: threshold fraction, reference curve and time read.
        baseline: variant to beat; default `pick_baseline`.
        n_boot: bootstrap replicates (0 skips the interval and p_boot).
        seed: seeds the bootstrap and any sampled permutations.
    """
    baseline = baseline or pick_baseline(list(curves))  # no configs here: summarize() passes one in
    if baseline not in curves:
        raise CompareError(
            f"baseline {baseline!r} is not a variant; choose --baseline from: {', '.join(curves)}"
        )
    curves = {baseline: curves[baseline], **{n: c for n, c in curves.items() if n != baseline}}
    if not (curves[baseline].grid > 0).any():
        raise CompareError("the window holds no checkpoint after the start (T > 0); widen it")
    scored = {n: scored_curves(c) for n, c in curves.items()}  # the plots keep T = 0
    thr = float(rule_threshold(scored[baseline].values, rule))
    if np.isnan(thr):
        raise CompareError(
            f"the runs of baseline '{baseline}' share no checkpoint, so it has no mean curve; "
            "narrow the window or use --reference per-seed"
        )
    boots = bootstrap_speedups(scored, baseline, rule, n_boot, seed)
    rows = [{"variant": n, **variant_row(c, thr, rule)} for n, c in scored.items()]
    for row in rows:
        row["speedup"] = float(speedup(rows[0]["time"], row["time"]))
        row.update(speedup_lo=np.nan, speedup_hi=np.nan, p_boot=np.nan, p_perm=np.nan)
        if row["variant"] != baseline:
            row["p_perm"] = permutation_pvalue(rows[0]["seed_times"], row["seed_times"], seed=seed)
        if n_boot and row["variant"] != baseline:
            row["speedup_lo"], row["speedup_hi"] = percentile_interval(boots[row["variant"]])
            row["p_boot"] = bootstrap_pvalue(boots[row["variant"]])
    return Summary(rows, rule, baseline, thr, curves, n_boot, seed, warnings=one_seed_warnings(curves))
