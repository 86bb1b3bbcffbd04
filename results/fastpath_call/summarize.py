"""Print the fast-path call's results as one short Markdown summary (see results/fastpath_call/call.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def mean(recs: list[dict], key: str) -> float:
    return sum(r.get(key, 0.0) for r in recs) / max(len(recs), 1)


def runs(root: Path) -> list[str]:
    out = [
        "| run | steps | s/step | generation s | update s | compile s (total) | eval accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in sorted(p for p in root.iterdir() if (p / "metrics.jsonl").exists()):
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        train = [r for r in recs if r["kind"] == "train"]
        late = train[2:] or train  # the first steps carry warm-ups
        comp = sum(r.get("timing/compile", 0.0) for r in train)
        acc = " ".join(f"{r['eval/accuracy']:.3f}" for r in recs if r["kind"] == "eval")
        out.append(
            f"| {d.name} | {len(train)} | {mean(late, 'timing/step'):.3f} | {mean(late, 'timing/generation'):.3f} "
            f"| {mean(late, 'timing/update'):.3f} | {comp:.1f} | {acc} |"
        )
    return out


def main() -> None:
    root = Path(sys.argv[1])
    parts = ["# fast-path call", "", *runs(root), ""]
    for md in sorted(root.rglob("*.md")):
        if md.name != "summary.md":
            parts += [f"## {md.relative_to(root)}", "", md.read_text(), ""]
    print("\n".join(parts))


if __name__ == "__main__":
    main()
