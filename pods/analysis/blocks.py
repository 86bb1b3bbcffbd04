"""Time-to-threshold speedups when runs come in blocks that do not share a starting point.

`pods.compare` pools every seed of a variant into one mean curve. That is the right read when all runs
start from the same policy. When they come in blocks that each start elsewhere (for instance one GPU
call each, where each call builds its own policy), pooling mixes two populations: the threshold is set by
the pooled mean and one block's seeds may never reach it while the other's always do. Here each block is
read on its own under the same rule, and the blocks are combined:

- per block b: threshold_b = rule.threshold x the baseline's mean-curve peak in b (T > 0), times on each
  variant's mean curve in b, speedup_b = t_base_b / t_var_b;
- combined speedup = the geometric mean of the block speedups (each block weighs the same);
- interval: percentile bootstrap, seeds resampled with replacement within each block and variant;
- p: exact stratified permutation test on per-seed times to each block's threshold (labels permuted
  within blocks; the statistic sums the per-block rank-sum statistics of `peak.permutation_pvalue`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from pods.analysis.errors import CompareError
from pods.analysis.peak import (
    Curves,
    Rule,
    percentile_interval,
    rank_sum_null,
    resample_seeds,
    rule_threshold,
    scored_curves,
    speedup,
    time_to_threshold,
    variant_time,
)


@dataclass
class BlockedRow:
    variant: str
    block_speedups: dict[str, float]  # block -> its own speedup
    speedup: float  # geometric mean over blocks
    lo: float
    hi: float
    p_boot: float  # share of bootstrap combined speedups <= 1
    p_perm: float  # one-sided, H1: the variant is faster


def geometric_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Geometric mean that keeps 0 (a block never reached by the variant) and inf (never by the
    baseline) meaningful; NaN if any block has neither (0 x inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.exp(np.log(np.asarray(x, dtype=float)).mean(axis=axis))


def stratified_permutation_pvalue(
    pairs: list[tuple[np.ndarray, np.ndarray]], max_exact: int = 200_000, seed: int = 0
) -> float:
    """Exact (or sampled) one-sided permutation p over blocks. Each pair is (baseline per-seed times,
    variant per-seed times) in one block; labels are permuted within blocks only."""
    per_block = []
    for t_base, t_var in pairs:
        if len(t_base) == 0 or len(t_var) == 0:
            raise CompareError("a block has no seeds of the baseline or of the variant")
        per_block.append(rank_sum_null(t_base, t_var, max_exact, seed))
    observed = sum(o for _, o in per_block)
    sizes = [len(s) for s, _ in per_block]
    if int(np.prod(sizes)) <= max_exact:
        null = np.array([sum(c) for c in product(*(s for s, _ in per_block))])
    else:
        rng = np.random.default_rng(seed)
        null = sum(s[rng.integers(0, len(s), max_exact)] for s, _ in per_block)
    return float(np.mean(null >= observed - 1e-9))


def blocked_summary(
    blocks: dict[str, dict[str, Curves]], baseline: str, rule: Rule, n_boot: int = 2000, seed: int = 0
) -> list[BlockedRow]:
    """Compare every variant with `baseline` block by block (see the module docstring).

    Args:
        blocks: block name -> (variant -> its seeds on the block's grid), as `build_curves` returns.
        baseline: the variant to beat; must be in every block, as must every variant compared.
    """
    if not blocks:
        raise CompareError("no blocks to compare")
    names = [set(b) for b in blocks.values()]
    common = set.intersection(*names)
    if baseline not in common:
        raise CompareError(
            f"baseline {baseline!r} is not in every block; variants in all blocks: "
            f"{', '.join(sorted(common)) or 'none'}"
        )
    scored = {k: {v: scored_curves(c) for v, c in b.items()} for k, b in blocks.items()}
    rng = np.random.default_rng(seed)
    rows = []
    for variant in sorted(common - {baseline}):
        per_block, boot_logs, pairs = {}, [], []
        for k, b in scored.items():
            base, var = b[baseline], b[variant]
            thr = rule_threshold(base.values, rule)  # the block's own threshold
            per_block[k] = float(
                speedup(
                    variant_time(base.grid, base.values, thr, rule),
                    variant_time(base.grid, var.values, thr, rule),
                )
            )
            interp = rule.time_read == "interpolate"
            pairs.append(
                (
                    time_to_threshold(base.grid, base.values, thr, interp),
                    time_to_threshold(base.grid, var.values, thr, interp),
                )
            )
            if n_boot:
                bb = resample_seeds(base.values, n_boot, rng)
                bv = resample_seeds(var.values, n_boot, rng)
                bthr = rule_threshold(bb, rule)
                boot_logs.append(
                    speedup(variant_time(base.grid, bb, bthr, rule), variant_time(base.grid, bv, bthr, rule))
                )
        combined = float(geometric_mean(np.array(list(per_block.values()))))
        lo = hi = p_boot = np.nan
        if n_boot:
            boots = geometric_mean(np.stack(boot_logs, axis=-1))
            lo, hi = percentile_interval(boots)
            s = boots[~np.isnan(boots)]
            p_boot = float(np.mean(s <= 1.0)) if s.size else np.nan
        rows.append(
            BlockedRow(
                variant, per_block, combined, lo, hi, p_boot, stratified_permutation_pvalue(pairs, seed=seed)
            )
        )
    return rows


def seed_of(run: str) -> str:
    """The seed token at the end of a pods run name (`max_variance-n64-m16-s11` -> `11`)."""
    head, sep, tail = run.rpartition("-s")
    if not sep or not tail.isdigit():
        raise CompareError(f"run {run!r} does not end in -s<seed>; cannot pair it by seed")
    return tail


def paired_gaps(base: Curves, var: Curves) -> dict[str, float]:
    """Seed -> the variant's mean accuracy gap over the baseline across the checkpoints T > 0 (the area
    between the two seeds' curves over the window, divided by its length). Runs pair by seed: the same
    seed ran on the same GPU beside each other in a blocked sweep."""
    b = {seed_of(r): v for r, v in zip(base.runs, base.values)}
    out = {}
    for r, v in zip(var.runs, var.values):
        s = seed_of(r)
        if s in b:
            keep = (base.grid > 0) & ~np.isnan(v) & ~np.isnan(b[s])
            out[s] = float((v[keep] - b[s][keep]).mean())
    return out


def sign_flip_pvalue(diffs: np.ndarray, chunk: int = 1 << 18) -> float:
    """Two-sided exact sign-flip permutation p of paired differences: the share of the 2^n sign patterns
    whose |sum| is at least the observed |sum| (H0: each difference is symmetric about 0). Enumerated in
    chunks, so n up to ~26 is seconds.

    >>> sign_flip_pvalue(np.array([1.0, 2.0, 3.0]))  # only all-plus and all-minus reach |6|
    0.25
    """
    d = np.asarray(diffs, dtype=np.float64)
    n = len(d)
    if n == 0:
        return float("nan")
    if n > 30:
        raise CompareError(f"exact sign-flip enumeration over 2^{n} patterns is too large (n <= 30)")
    obs = abs(d.sum()) * (1 - 1e-12)  # ties count as extreme
    bits = 2 ** np.arange(n, dtype=np.int64)
    hits = 0
    for start in range(0, 1 << n, chunk):
        codes = np.arange(start, min(start + chunk, 1 << n), dtype=np.int64)
        signs = np.where((codes[:, None] & bits) > 0, -1.0, 1.0)  # (chunk, n)
        hits += int((np.abs(signs @ d) >= obs).sum())
    return hits / float(1 << n)


def gaps_markdown(blocks: dict[str, dict[str, Curves]], baseline: str, sign_flip: bool = False) -> str:
    """Per variant, the paired seed gaps over the baseline in every block; with `sign_flip`, the exact
    two-sided sign-flip permutation p of their mean (headline v3 registers it as a secondary outcome)."""
    common = sorted(set.intersection(*(set(b) for b in blocks.values())) - {baseline})
    status = "registered secondary, sign-flip p exact" if sign_flip else "exploratory, not pre-registered"
    lines = [
        f"Paired accuracy gap over {baseline} (each seed's mean over the checkpoints T > 0 of its curve minus "
        f"the same seed's baseline curve; {status})\n",
        "| variant | seeds | mean gap | seeds above 0 |"
        + (" p_signflip |" if sign_flip else "")
        + " per seed |",
        "|---|---|---|---|" + ("---|" if sign_flip else "") + "---|",
    ]
    for v in common:
        gaps = {f"{k}/s{s}": g for k, b in blocks.items() for s, g in paired_gaps(b[baseline], b[v]).items()}
        vals = np.array(list(gaps.values()))
        per = ", ".join(f"{k} {g:+.3f}" for k, g in gaps.items())
        p = f" {sign_flip_pvalue(vals):.3f} |" if sign_flip else ""
        lines.append(
            f"| {v} | {len(vals)} | {vals.mean():+.4f} | {(vals > 0).sum()}/{len(vals)} |{p} {per} |"
        )
    return "\n".join(lines) + "\n"


def to_markdown(rows: list[BlockedRow], baseline: str, rule: Rule, n_boot: int, seed: int) -> str:
    blocks = list(rows[0].block_speedups) if rows else []
    head = (
        f"Blocked read (each block its own threshold and times under rule '{rule.name}'; combined = geometric "
        f"mean of block speedups; 95% percentile bootstrap over seeds within block and variant, {n_boot} "
        f"resamples, seed {seed}; p_perm exact stratified permutation on per-seed times). Baseline: "
        f"{baseline}.\n\n"
    )
    cols = ["variant", *[f"speedup in {b}" for b in blocks], "combined [95% CI]", "p_boot", "p_perm"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [
            r.variant,
            *[f"{r.block_speedups[b]:.2f}x" for b in blocks],
            f"{r.speedup:.2f}x [{r.lo:.2f}, {r.hi:.2f}]",
            f"{r.p_boot:.3f}",
            f"{r.p_perm:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"
