"""notebooks/compare_sweep.ipynb runs top to bottom on a synthetic sweep."""

import json
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.analysis import saved_config

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "compare_sweep.ipynb"


def write_run(d: Path, variant: str, seed: int, accs: list[float]) -> None:
    d.mkdir(parents=True)
    meta = dict(name=f"{variant}-s{seed}", variant=variant, seed=seed, group="nb")
    (d / "run_info.json").write_text(json.dumps(meta))
    (d / "config.yaml").write_text(saved_config(variant))
    lines = [
        {
            "kind": "eval",
            "step": k,
            "train_time": 25.0 * k,
            "rollouts": 64 * k,
            "wall_time": 0.0,
            "eval/accuracy": a,
        }
        for k, a in enumerate(accs)
    ]
    (d / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")


def test_notebook_is_saved_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


def test_notebook_runs_on_a_sweep(tmp_path, monkeypatch):
    for s in (1, 2):
        write_run(tmp_path / "sweep" / f"{s}", "none-n16-m16", s, [0.2, 0.4, 0.6, 0.7, 0.8, 0.78])
        write_run(
            tmp_path / "sweep" / f"{s + 2}", "max_variance-n64-m16", s, [0.2, 0.5, 0.792, 0.8, 0.79, 0.79]
        )
    monkeypatch.setenv("PODS_SWEEP_DIR", str(tmp_path / "sweep"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "rule: paper" in text and "rule: strict" in text
    assert "| max_variance-n64-m16 | 2 |" in text and "2.00x [2.00, 2.00]" in text  # paper
    assert "1.33x" in text  # strict: 100 / 75
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # vs time, vs rollouts
    assert not (tmp_path / "sweep" / "compare").exists()  # the notebook writes nothing
