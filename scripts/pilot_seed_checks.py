"""Headline v4's pilot read (results/headline_v4/PLAN.md): the per-seed checks of pods/analysis/seeds.py for
each setting, one sub-directory of the pilot per setting, and the chosen setting:

    python scripts/pilot_seed_checks.py /tmp/hv4/pilot --grid-step 10 --x-max 300 --alone /tmp/hv4/alone \
        --chosen-env chosen.env > checks.md

Each setting's runs are read as `pods.compare` reads them (checkpoints every --grid-step s of training clock,
nearest eval). The step costs are each run's mean `timing/step` over steps 3 onward, shared (the pilot's own
runs) and alone (runs each alone on a GPU, --alone). With --chosen-env the chosen setting's optim.lr and
optim.warmup_steps (from a run's config.yaml) are written there as LR= and WARMUP_STEPS= lines.
"""

from __future__ import annotations

import argparse
import math
import statistics as st
from pathlib import Path

from omegaconf import OmegaConf

from pods.analysis.curves import build_curves
from pods.analysis.errors import CompareError
from pods.analysis.load import find_run_dirs, load_runs, read_jsonl
from pods.analysis.pilot import GRPO, PODS, late_mean, step_ratio, train_records
from pods.analysis.seeds import SeedCriteria, check_setting, choose, rises, takes_off


def read_setting(
    run_dirs: list[Path], grid_step: float, x_max: float, crit: SeedCriteria, x: str = "train_time"
) -> dict:
    curves = build_curves(load_runs(run_dirs), x, "nearest", grid_step, 0.0, x_max)
    if GRPO not in curves:
        raise CompareError(f"a setting needs {GRPO} runs; found {', '.join(curves)}")
    pods = curves[PODS].values if PODS in curves else []
    row = check_setting(curves[GRPO].values, pods, crit)
    row["names"] = {"grpo": curves[GRPO].runs, "pods": curves[PODS].runs if PODS in curves else []}
    steps = {v: [late_mean(r, "timing/step") for r in train_records(run_dirs, v)] for v in (GRPO, PODS)}
    row["grpo_step"] = st.mean(steps[GRPO]) if steps[GRPO] else math.nan
    row["shared_ratio"] = step_ratio(run_dirs)
    # a run stopped before the window's end (the call's time limit) would read its last eval at every later
    # checkpoint (nearest read): such runs are named, not hidden
    last = {
        d.name: max((r[x] for r in read_jsonl(d / "metrics.jsonl") if r.get("kind") == "eval"), default=0)
        for d in run_dirs
    }
    row["cut_short"] = sorted(n for n, t in last.items() if t < x_max - grid_step / 2)
    cfg = OmegaConf.load(run_dirs[0] / "config.yaml")
    row["lr"], row["warmup"] = cfg.optim.lr, cfg.optim.get("warmup_steps", 0)
    return row


def to_markdown(rows: dict[str, dict], crit: SeedCriteria, alone_ratio: float) -> str:
    mark = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    out = [
        f"| setting | lr | warm-up steps | GRPO/PODS seeds | start | GRPO mean rise | median seed noise | rise/noise "
        f"| (a) GRPO seeds rising | (b) take-offs | (c) end SD <= {crit.max_end_spread:g} x rise | (d) rise >= "
        f"{crit.min_rise:g} and >= {crit.min_snr:g} x noise | PODS mean rise | GRPO s/step | PODS/GRPO step "
        "shared | passes |",
        "|" + "---|" * 16,
    ]
    for k, r in rows.items():
        out.append(
            f"| {k} | {r['lr']:g} | {r['warmup']} | {r['grpo_seeds']}/{r['pods_seeds']} | {r['start']:.3f} | "
            f"{r['rise']:+.3f} | {r['noise']:.4f} | {r['snr']:.1f} | {r['grpo_rises']}/{r['grpo_seeds']} "
            f"{mark(r['a'])} | {r['takeoffs']} {mark(r['b'])} | {r['end_spread']:.4f} {mark(r['c'])} | "
            f"{mark(r['d'])} | {r['pods_rise']:+.3f} | {r['grpo_step']:.3f} | {r['shared_ratio']:.3f} | "
            f"{mark(r['passes'])} |"
        )
    out += ["", f"PODS/GRPO step cost alone (one run each alone on a GPU): {alone_ratio:.3f}", ""]
    for k, r in rows.items():
        if r["cut_short"]:
            out += [f"**{k}: runs stopped before the window's end:** {', '.join(r['cut_short'])}", ""]
    out += [
        "Per seed (end = mean of the last checkpoints; noise = SD of 10-s changes; jump = largest 10-s change):"
    ]
    out += ["", "| setting | run | start | end | rise | noise | jump | rises | takes off |", "|" + "---|" * 9]
    for k, r in rows.items():
        for arm in ("grpo", "pods"):
            for name, s in zip(r["names"][arm], r["seeds"][arm], strict=True):
                up, off = rises(s), takes_off(s, crit.max_jump_share)
                out.append(
                    f"| {k} | {name} | {s['start']:.3f} | {s['end']:.3f} | {s['rise']:+.3f} | {s['noise']:.4f} | "
                    f"{s['jump']:+.3f} | {'yes' if up else 'no'} | {'**yes**' if off else 'no'} |"
                )
    chosen = choose(rows)
    out += [
        "",
        f"Chosen (largest GRPO rise over median seed noise among passing settings): {chosen or 'none passes'}",
    ]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pilot", type=Path, help="one sub-directory of runs per setting, or one directory of runs")
    p.add_argument("--x", default="train_time", choices=("train_time", "step"), help="the curves' axis")
    p.add_argument("--grid-step", type=float, required=True)
    p.add_argument("--x-max", type=float, required=True)
    p.add_argument("--alone", type=Path, help="runs each alone on a GPU (one GRPO, one PODS)")
    p.add_argument(
        "--chosen-env",
        type=Path,
        help="write the chosen setting's LR=, WARMUP_STEPS=, SETTING= and SETTING_EXTRA= here",
    )
    args = p.parse_args()
    # a directory of runs is one setting (a confirmatory call); otherwise each sub-directory with runs is one
    is_runs = (
        any((d / "metrics.jsonl").is_file() for d in args.pilot.iterdir()) if args.pilot.is_dir() else False
    )
    settings = (
        [args.pilot]
        if is_runs
        else sorted(d for d in args.pilot.iterdir() if d.is_dir() and find_run_dirs(d))
    )
    if not settings:
        raise SystemExit(f"no setting with runs under {args.pilot}")
    crit = SeedCriteria()
    rows = {
        d.name: read_setting(find_run_dirs(d), args.grid_step, args.x_max, crit, args.x) for d in settings
    }
    alone = step_ratio(find_run_dirs(args.alone)) if args.alone and args.alone.is_dir() else math.nan
    print(to_markdown(rows, crit, alone))
    chosen = choose(rows)
    if args.chosen_env and chosen:
        env = f"LR={rows[chosen]['lr']}\nWARMUP_STEPS={rows[chosen]['warmup']}\nSETTING={chosen}\n"
        # the setting's own overrides beyond lr and warm-up (its eval, prompts per step), as the launch wrote them
        extra_file = next(d for d in settings if d.name == chosen) / "setting_extra.txt"
        extra = extra_file.read_text().strip() if extra_file.is_file() else ""
        if extra:
            env += f'SETTING_EXTRA="{extra}"\n'
        args.chosen_env.write_text(env)


if __name__ == "__main__":
    main()
