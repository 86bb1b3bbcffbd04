"""Per-seed pilot checks (results/headline_v4/PLAN.md): does every run learn gradually?

Headline v3's pilot read only GRPO's mean curve, which looked like a steady rise while each run was a step
function at a random moment (a "take-off"). These checks read every seed's own curve, on the checkpoint grid
(every `grid_step` s of training clock, each checkpoint read at the nearest eval, as `pods.compare` reads them):

  start  the seed's value at T = 0 (the shipped policy's greedy eval: the same for every seed);
  end    the mean of the seed's last `tail` checkpoints (three evals, so the end is not one eval's noise);
  rise   end - start;
  noise  the standard deviation of the seed's checkpoint-to-checkpoint changes y[k] - y[k-1] (the trend is
         their mean, so it does not count as noise);
  jump   the largest single change y[k] - y[k-1] (one 10-s interval).

A setting passes when
  (a) every GRPO seed rises: rise > 0 and rise > its own noise;
  (b) no seed takes off: every seed that rises (as in (a)) has jump <= `max_jump_share` x rise (no 10-s
      interval holds more than half the seed's rise). A seed whose rise is within its own noise has not
      risen, so it cannot take off (half of a rise of noise is noise); a GRPO seed like that fails (a);
  (c) the GRPO seeds agree at the window's end: the SD of their ends is <= `max_end_spread` x the mean rise;
  (d) the choice rule's floor: GRPO's mean rise >= `min_rise` and >= `min_snr` x the median GRPO seed noise.
Among passing settings the one with the largest GRPO mean rise over median noise is chosen (the signal a
time-to-threshold read has against checkpoint noise); ties go to the first listed. The PODS/GRPO step cost
(alone and shared) is reported beside them, not a gate: every setting runs the same code on the same policy.
"""

from __future__ import annotations

import math
import statistics as st
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SeedCriteria:
    tail: int = 3  # checkpoints averaged into a seed's end
    max_jump_share: float = 0.5  # (b)
    max_end_spread: float = 0.5  # (c) SD of GRPO ends over the mean rise
    min_rise: float = 0.05  # (d)
    min_snr: float = 4.0  # (d) mean rise over the median seed noise


def seed_stats(curve: np.ndarray, tail: int = 3) -> dict:
    """One seed's start, end, rise, noise and jump from its values on the checkpoint grid (T = 0 first)."""
    y = np.asarray(curve, dtype=float)
    if y.ndim != 1 or len(y) < tail + 2 or np.isnan(y).any():
        raise ValueError(f"a seed's curve needs {tail + 2}+ checkpoints and no gaps; got {y.tolist()}")
    d = np.diff(y)
    start, end = float(y[0]), float(y[-tail:].mean())
    return {
        "start": start,
        "end": end,
        "rise": end - start,
        "noise": float(d.std(ddof=1)),
        "jump": float(d.max()),
    }


def rises(s: dict) -> bool:
    """(a) for one seed."""
    return s["rise"] > 0 and s["rise"] > s["noise"]


def takes_off(s: dict, max_jump_share: float = 0.5) -> bool:
    """(b) fails for one seed: it rises, and one interval holds more than `max_jump_share` of the rise."""
    return rises(s) and s["jump"] > max_jump_share * s["rise"]


def check_setting(grpo: np.ndarray, pods: np.ndarray, crit: SeedCriteria = SeedCriteria()) -> dict:
    """The per-seed checks of one setting from its GRPO and PODS seeds' curves ((S, G) arrays on one grid)."""
    g = [seed_stats(c, crit.tail) for c in np.atleast_2d(grpo)]
    p = [seed_stats(c, crit.tail) for c in np.atleast_2d(pods)] if np.size(pods) else []
    if len(g) < 2:
        raise ValueError(f"a setting needs 2+ GRPO seeds to read their spread; got {len(g)}")
    rise = st.mean(s["rise"] for s in g)
    noise = st.median(s["noise"] for s in g)
    spread = st.stdev(s["end"] for s in g)
    row = {
        "grpo_seeds": len(g),
        "pods_seeds": len(p),
        "start": st.mean(s["start"] for s in g),
        "rise": rise,
        "noise": noise,
        "snr": rise / noise if noise > 0 else math.inf,
        "end_spread": spread,
        "grpo_rises": sum(rises(s) for s in g),
        "takeoffs": sum(takes_off(s, crit.max_jump_share) for s in g + p),
        "pods_rise": st.mean(s["rise"] for s in p) if p else math.nan,
        "seeds": {"grpo": g, "pods": p},
    }
    row["a"] = row["grpo_rises"] == len(g)
    row["b"] = row["takeoffs"] == 0
    row["c"] = spread <= crit.max_end_spread * rise if rise > 0 else False
    row["d"] = rise >= crit.min_rise and rise >= crit.min_snr * noise
    row["passes"] = all(row[k] for k in "abcd")
    return row


def choose(rows: dict[str, dict]) -> str | None:
    """The passing setting with the largest GRPO rise over median seed noise (first listed on ties), or None."""
    passing = [k for k, r in rows.items() if r["passes"]]
    return max(passing, key=lambda k: rows[k]["snr"]) if passing else None


def fall(curve: np.ndarray, tail: int = 3) -> float:
    """How far a seed's end (the mean of its last `tail` checkpoints) lies below its best stretch (the highest
    mean of `tail` consecutive checkpoints): 0 for a curve that ends at its best (results/greso_v1/PLAN.md (iii)).

    >>> round(fall(np.array([0.40, 0.42, 0.44, 0.46, 0.45, 0.44, 0.43])), 3), fall(np.array([0.1, 0.2, 0.3, 0.4]))
    (0.01, 0.0)
    """
    y = np.asarray(curve, dtype=float)
    best = np.convolve(y, np.ones(tail) / tail, mode="valid").max()
    return float(max(best - y[-tail:].mean(), 0.0))


def size_passes(curve: np.ndarray, drawn: float, size: int, min_visits: float = 3.0) -> dict:
    """GRESO v1's pilot criteria for a training-set size on one dynamic-sampling seed: (i) prompts drawn / size
    >= min_visits, (ii) it rises (criterion (a) above), (iii) its fall <= its noise."""
    s = seed_stats(curve)
    visits, down = drawn / size, fall(curve)
    checks = {"revisits": visits >= min_visits, "rises": rises(s), "holds": down <= s["noise"]}
    return {**s, "visits": visits, "fall": down, **checks, "passes": all(checks.values())}
