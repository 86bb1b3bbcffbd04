"""Write a dataset config's train and eval splits to jsonl (question, answer), exactly as pods loads them.

Machines without reasoning-gym (or without network for hub datasets) then train from the files with
`dataset.source=local dataset.task=<dir>/train.jsonl dataset.eval_task=<dir>/eval.jsonl`:

    python scripts/export_dataset.py conf/dataset/arithmetic.yaml data/arithmetic
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import load_examples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="a conf/dataset/*.yaml file")
    p.add_argument("out", help="output directory")
    p.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. train_size=8000")
    args = p.parse_args()
    cfg = OmegaConf.merge(
        OmegaConf.structured(DatasetConfig),
        OmegaConf.load(args.config),
        OmegaConf.from_dotlist(args.overrides),
    )
    train, _ = load_examples(cfg, "train")
    evals, report = load_examples(cfg, "eval", exclude={e.question for e in train})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("eval", evals)):
        with open(out / f"{name}.jsonl", "w") as f:
            for e in rows:
                f.write(json.dumps({"question": e.question, "answer": e.answer}) + "\n")
    print(f"wrote {len(train)} train and {len(evals)} eval rows to {out} (eval bad rows: {report.bad})")


if __name__ == "__main__":
    main()
