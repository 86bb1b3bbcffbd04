"""Write a held-out eval set of the hard chain sums (results/headline_v4/PLAN.md), deterministic:

    python scripts/export_hard_eval.py --out data/arithmetic_hard/eval_2k.jsonl

The questions are drawn by reasoning-gym's chain_sum with `conf/dataset/arithmetic_hard.yaml`'s settings
(3-5 terms, 1-3 digits) under a data seed no other export used (--data-seed), in generation order. A question
is kept only if it is new: not in the RL train set, not in the SFT set the shipped policy learned from, not in
the old 475-question eval (the policy's build was chosen on it), and not a repeat within the set. The first
--size kept questions are written, so every row is scored (the local loader drops repeats) and the set is
disjoint from everything the policy saw or was chosen on (tests/data/test_hard_eval.py checks it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import load_examples

ROOT = Path(__file__).resolve().parents[1]
EXCLUDE = (
    "data/arithmetic_hard/train.jsonl",
    "data/arithmetic_hard_sft/train.jsonl",
    "data/arithmetic_hard/eval.jsonl",
)


def questions(path: Path) -> set[str]:
    return {json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()}


def held_out(drawn: list[tuple[str, str]], seen: set[str], size: int) -> list[tuple[str, str]]:
    """The first `size` (question, answer) pairs of `drawn` whose question is neither in `seen` nor repeated."""
    out, taken = [], set(seen)
    for q, a in drawn:
        if q not in taken:
            out.append((q, a))
            taken.add(q)
        if len(out) == size:
            return out
    raise SystemExit(f"only {len(out)} new questions among {len(drawn)} drawn; raise --draw")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--draw", type=int, default=4000, help="questions generated before filtering")
    p.add_argument("--data-seed", type=int, default=3737)
    args = p.parse_args()
    cfg = OmegaConf.merge(
        OmegaConf.structured(DatasetConfig),
        OmegaConf.load(ROOT / "conf/dataset/arithmetic_hard.yaml"),
        {"data_seed": args.data_seed, "eval_size": args.draw},
    )
    drawn, _ = load_examples(cfg, "eval")
    seen = set().union(*(questions(ROOT / f) for f in EXCLUDE))
    rows = held_out([(e.question, e.answer) for e in drawn], seen, args.size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for q, a in rows:
            f.write(json.dumps({"question": q, "answer": a}) + "\n")
    print(f"wrote {len(rows)} held-out questions to {args.out} ({len(drawn)} drawn, seed {args.data_seed})")


if __name__ == "__main__":
    main()
